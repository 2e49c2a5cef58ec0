package eagle3

import (
	"fmt"
	"math"

	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
)

// stepAct holds what one unrolled step keeps for its backward pass: the
// layer's activations (deagle3.Acts; Acts.H is the step's hidden input, fc's
// output or the previous step's Out) and the step's rows.
type stepAct struct {
	*deagle3.Acts
	dfn tensor.Tensor // [R,H] gradient at norm(out), from the lm_head
	// post holds norm(out) [R,H], the next step's hidden input, when the
	// draft feeds its normed output forward (Norms.NormOutput).
	post tensor.Tensor
	tok  []int32       // input token per row (-1: past the end, zero embedding)
	pos  []int32       // RoPE position per row, written to Acts.Pos
	w    []float32     // loss weight per row: decay^k / count_k, 0 when not kept
	wt   tensor.Tensor // w on the device [R, 1]
	pred []int32       // draft argmax (draft index) per row
}

// net is the unrolled draft with every buffer for a batch of up to maxRows
// tokens in sequences of at most maxLen, on a device of its own.
type net struct {
	g      deagle3.Geometry
	steps  int
	decay  float64
	dev    tensor.Device
	layer  *deagle3.Layer // its master weights on the device, p their host copy
	attn   *deagle3.TTT
	p      *deagle3.Params
	grW    *deagle3.Weights // the gradients, on the device
	embed  tensor.Weight    // the target's input embedding [V, H]
	ids32  tensor.Tensor    // I32 [1, N] the draft vocabulary's target ids
	head   *nn.Linear       // the target's lm_head [V, H], frozen
	vocab  *deagle3.Vocab
	maxRow int
	maxLen int
	invTau float64 // 1/τ: the target distribution is softmax(logits·invTau)
	// lk is the LK loss trained instead of the soft cross-entropy when
	// useLK (--loss other than ce).
	lk    tensor.LK
	useLK bool

	// The batch.
	rows   int
	feat   tensor.Tensor // [R,3H]
	fcActs *deagle3.FCActs
	fcOut  tensor.Tensor // [R,H]
	tokens []int32       // [R]
	mask   []bool        // [R]
	pT     tensor.Tensor // [(R+steps+1), N] target distribution over the draft vocab, per row
	tgtID  []int32       // [R] target argmax over the full vocabulary
	act    []stepAct

	// Per-step statistics of the last forward.
	lossK    []float64 // mean soft cross-entropy (or LK loss) over kept rows
	alphaK   []float64 // with an LK loss, mean α over kept rows
	countK   []int     // kept rows
	maskedK  []int     // rows whose predicted token is a response token
	correctK []int     // of those, rows where draft argmax == target argmax

	// Scratch.
	e       tensor.Tensor // [R,H] the step's token embeddings
	ids     []int         // [R] the step's token ids for the gather
	scratch *deagle3.Scratch
	grads   *deagle3.GradScratch
	fn      tensor.Tensor // [R,H]
	dOut    tensor.Tensor // [R,H]
	dH      tensor.Tensor // [R,H]
	logits  tensor.Tensor // [R,N]
	final   tensor.Tensor // [prepRows,H] target final states
	full    tensor.Tensor // [prepRows,V] their target logits
}

const prepRows = 64

// newNet allocates every buffer once, and the layer's master weights on the
// device, written from p.
func newNet(g deagle3.Geometry, steps int, decay float64, dev tensor.Device, p *deagle3.Params, embed, head []float32, vocab *deagle3.Vocab, maxRows, maxLen int, withGrad bool) (*net, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if steps < 1 {
		return nil, fmt.Errorf("eagle3: the TTT unroll needs at least one step, got %d", steps)
	}
	dev = cpu.SiblingOf(dev)
	layer, err := deagle3.NewTrainLayer(dev, g, p, maxLen+steps)
	if err != nil {
		return nil, err
	}
	h, N, V := g.Hidden, g.DraftVocab, g.Vocab
	if len(embed) != V*h || len(head) != V*h {
		return nil, fmt.Errorf("eagle3: the target's embedding and lm_head have %d and %d values, want vocab %d x hidden %d", len(embed), len(head), V, h)
	}
	R := maxRows
	attn, err := deagle3.NewTTT(g, dev, steps, maxRows, withGrad)
	if err != nil {
		return nil, err
	}
	t := &net{g: g, steps: steps, decay: decay, dev: dev, layer: layer, p: p,
		embed: tensor.WeightOf(tensor.F32Matrix(embed, V, h)), vocab: vocab,
		maxRow: maxRows, maxLen: maxLen, invTau: 1, attn: attn}
	if t.head, err = nn.NewLinear(dev, tensor.F32Matrix(head, V, h), nil); err != nil {
		return nil, fmt.Errorf("eagle3: the target's lm_head: %w", err)
	}
	if withGrad {
		if t.grW, err = deagle3.NewWeights(dev, g); err != nil {
			return nil, err
		}
		if t.grads, err = layer.NewGradScratch(dev, R); err != nil {
			return nil, err
		}
	}
	f := func(n int) []float32 { return make([]float32, n) }
	al := tensor.Allocator{Dev: dev}
	alloc := al.F32
	t.feat, t.fcOut = alloc(R, 3*h), alloc(R, h)
	t.tokens, t.mask, t.tgtID = make([]int32, R), make([]bool, R), make([]int32, R)
	t.pT = alloc(R+steps+1, N)
	if t.ids32, err = dev.Alloc(tensor.I32, 1, N); err != nil {
		return nil, fmt.Errorf("eagle3: %w", err)
	}
	dev.WriteI32(t.ids32, vocab.IDs[:N])
	t.e, t.ids = alloc(R, h), make([]int, R)
	t.act = make([]stepAct, steps)
	for k := range t.act {
		s := &t.act[k]
		if s.Acts, err = layer.NewActs(dev, R); err != nil {
			return nil, err
		}
		// The layer writes step k's keys and values straight into the
		// attention's tensors.
		s.E, s.K, s.V = t.e, attn.Keys[k], attn.Vals[k]
		s.tok, s.pos, s.w, s.pred = make([]int32, R), make([]int32, R), f(R), make([]int32, R)
		s.wt = alloc(R, 1)
		if withGrad {
			s.dfn = alloc(R, h)
		}
		if g.NormOutput {
			s.post = alloc(R, h)
		}
	}
	t.lossK, t.countK, t.maskedK, t.correctK = make([]float64, steps), make([]int, steps), make([]int, steps), make([]int, steps)
	t.alphaK = make([]float64, steps)
	if t.scratch, err = layer.NewScratch(dev, R, false); err != nil {
		return nil, err
	}
	if t.fcActs, err = layer.NewFCActs(dev, R, withGrad); err != nil {
		return nil, err
	}
	t.fn, t.logits = alloc(R, h), alloc(R, N)
	t.final, t.full = alloc(prepRows, h), alloc(prepRows, V)
	if withGrad {
		t.dOut, t.dH = alloc(R, h), alloc(R, h)
	}
	if al.Err != nil {
		return nil, fmt.Errorf("eagle3: %w", al.Err)
	}
	return t, nil
}

// load packs samples (each truncated to maxLen tokens) into the batch buffers,
// computes the target distributions, and the per-step tokens, positions and
// loss weights. The caller guarantees the total fits in maxRows.
//
// Alignment (EAGLE-3's training-time test, as EAGLE and SpecForge train it): at step k, row i of a sequence of n tokens feeds the
// embedding of token i+1+k and is trained toward the target distribution at
// position i+1+k (which predicts token i+2+k). The row is kept when i+2+k < n,
// that predicted token is a response token (loss mask set), and the target's
// argmax over its full vocabulary is in the draft vocabulary. Each step's loss
// is the mean over its kept rows, weighted by decay^k; the batch loss is the
// sum over steps.
func (t *net) load(samples []*dataset.Sample) error {
	t.begin()
	for _, s := range samples {
		if err := t.add(s); err != nil {
			return err
		}
	}
	t.finish()
	return nil
}

// begin starts an empty batch.
func (t *net) begin() {
	t.attn.Seqs = t.attn.Seqs[:0]
	t.rows = 0
}

// add copies one sample (truncated to maxLen) into the batch, so the caller may
// reuse the sample's buffers afterwards.
func (t *net) add(s *dataset.Sample) error {
	h := t.g.Hidden
	si := len(t.attn.Seqs)
	r := t.rows
	n := min(len(s.Tokens), t.maxLen)
	if len(s.LossMask) != len(s.Tokens) || len(s.Final) != len(s.Tokens)*h {
		return fmt.Errorf("eagle3: batch sample %d: %d tokens need %d loss-mask entries and %d final-state values, got %d and %d",
			si, len(s.Tokens), len(s.Tokens), len(s.Tokens)*h, len(s.LossMask), len(s.Final))
	}
	if len(s.Features) != deagle3.Features {
		return fmt.Errorf("eagle3: batch sample %d has %d feature layers, want %d (low, middle, high)", si, len(s.Features), deagle3.Features)
	}
	for c := range s.Features {
		if len(s.Features[c]) != len(s.Tokens)*h {
			return fmt.Errorf("eagle3: batch sample %d: feature %d has %d values, want %d tokens x hidden %d", si, c, len(s.Features[c]), len(s.Tokens), h)
		}
	}
	if r+n > t.maxRow {
		return fmt.Errorf("eagle3: batch of %d+ tokens exceeds the %d-token buffers", r+n, t.maxRow)
	}
	// Row r+i of feat [R, 3H] is rows 3(r+i)..3(r+i)+2 of it as [3R, H].
	feat := t.feat.Reshape(3*t.feat.Rows(), h)
	for i := 0; i < n; i++ {
		for c := range s.Features {
			row := 3*(r+i) + c
			t.dev.Write(feat.RowRange(row, row+1), s.Features[c][i*h:(i+1)*h])
		}
		id := s.Tokens[i]
		if id < 0 || int(id) >= t.g.Vocab {
			return fmt.Errorf("eagle3: batch sample %d token %d is id %d, outside the target vocabulary [0, %d)", si, i, id, t.g.Vocab)
		}
		t.tokens[r+i] = id
		t.mask[r+i] = s.LossMask[i]
	}
	t.targetDist(s.Final[:n*h], r, n)
	t.attn.Seqs = append(t.attn.Seqs, tensor.Span{Start: r, N: n})
	t.rows = r + n
	return nil
}

// finish derives the per-step tokens, positions and loss weights.
func (t *net) finish() {
	r := t.rows
	t.dev.Zero(t.pT.RowRange(r, t.pT.Rows()))
	for k := range t.act {
		st := &t.act[k]
		count, masked := 0, 0
		for _, sp := range t.attn.Seqs {
			for i := 0; i < sp.N; i++ {
				row := sp.Start + i
				st.tok[row], st.pos[row], st.w[row] = -1, int32(i+k), 0
				if i+1+k < sp.N {
					st.tok[row] = t.tokens[row+1+k]
				}
				if i+2+k < sp.N && t.mask[row+2+k] {
					masked++
					if t.vocab.Index[t.tgtID[row+1+k]] >= 0 {
						st.w[row] = 1
						count++
					}
				}
			}
		}
		t.dev.WriteI32(st.Pos, st.pos[:r])
		t.countK[k], t.maskedK[k] = count, masked
		if count > 0 {
			wk := float32(math.Pow(t.decay, float64(k)) / float64(count))
			for row := 0; row < r; row++ {
				if st.w[row] != 0 {
					st.w[row] = wk
				}
			}
		}
		t.dev.Write(st.wt, st.w[:r])
	}
}

// targetDist computes, for n rows of final states starting at batch row r0,
// the target's full-vocabulary argmax and its softmax at temperature 1/invTau
// restricted to the draft vocabulary and renormalised (the frozen target
// lm_head applied to the post-norm state), in chunks of prepRows rows.
func (t *net) targetDist(final []float32, r0, n int) {
	h := t.g.Hidden
	for c := 0; c < n; c += prepRows {
		m := min(prepRows, n-c)
		fin, full := t.final.RowRange(0, m), t.full.RowRange(0, m)
		t.dev.Write(fin, final[c*h:(c+m)*h])
		t.head.Forward(t.dev, full, fin)
		t.dev.ArgMax(t.tgtID[r0+c:r0+c+m], full)
		p := t.pT.RowRange(r0+c, r0+c+m)
		t.dev.GatherCols(p, full, t.ids32)
		t.dev.Softmax(p, float32(t.invTau))
	}
}

// forward runs the unrolled draft over the loaded batch and returns the loss
// (sum over steps of decay^k times the step's mean soft cross-entropy, or
// mean LK loss with useLK, whose mean α per step goes to alphaK). With
// grad it also back-propagates each step's loss through the draft lm_head
// right away (into grW.LMHead and the step's dfn), so no [R, N] logits are
// kept.
func (t *net) forward(grad bool) float64 {
	R, dev := t.rows, t.dev
	t.layer.FC(dev, t.fcOut, t.feat.RowRange(0, R), t.fcActs)
	hIn := t.fcOut
	logits := t.logits.RowRange(0, R)
	var total float64
	for k := range t.act {
		st := &t.act[k]
		st.H = hIn
		t.gatherEmbed(st.tok)
		t.attn.Step = k
		t.layer.Forward(dev, st.Acts, t.scratch, R, t.attn)
		t.layer.Logits(dev, logits, t.fn, st.Out.RowRange(0, R))
		t.score(k)
		var dl tensor.Tensor
		if grad {
			dl = logits
		}
		var lk float64
		if t.useLK {
			// The same rows, targets and weights; α over the draft
			// vocabulary's target distribution as pT holds it.
			var alpha float64
			lk, alpha = dev.LKLoss(dl, logits, t.pT.RowRange(1+k, 1+k+R), st.wt.RowRange(0, R), t.lk)
			t.alphaK[k] = alpha / math.Pow(t.decay, float64(k))
		} else {
			lk = dev.SoftCrossEntropy(dl, logits, t.pT.RowRange(1+k, 1+k+R), st.wt.RowRange(0, R))
		}
		total += lk
		t.lossK[k] = lk / math.Pow(t.decay, float64(k))
		if grad {
			t.layer.LogitsBackward(dev, t.grW, st.dfn, logits, t.fn)
		}
		hIn = st.Out
		if t.g.NormOutput {
			// The next step reads norm(out), the lm_head's input, which
			// the next step's Logits overwrites in t.fn.
			dev.Copy(st.post.RowRange(0, R), t.fn.RowRange(0, R))
			hIn = st.post
		}
	}
	return total
}

// score records step k's draft argmax per row and counts the rows where it
// matches the target's argmax among rows whose predicted token is a response
// token (a target argmax outside the draft vocabulary counts as a miss).
func (t *net) score(k int) {
	st := &t.act[k]
	t.dev.ArgMax(st.pred[:t.rows], t.logits.RowRange(0, t.rows))
	correct := 0
	for _, sp := range t.attn.Seqs {
		for i := 0; i+2+k < sp.N; i++ {
			r := sp.Start + i
			if t.mask[r+2+k] && t.vocab.IDs[st.pred[r]] == t.tgtID[r+1+k] {
				correct++
			}
		}
	}
	t.correctK[k] = correct
}

// backward back-propagates the loss of the last forward(true) through the
// unroll, from the last step to the first, accumulating into t.grW.
func (t *net) backward() {
	R, dev := t.rows, t.dev
	dH, dOut := t.dH.RowRange(0, R), t.dOut.RowRange(0, R)
	dev.Zero(dH)
	t.attn.ZeroGrad(R)
	for k := t.steps - 1; k >= 0; k-- {
		st := &t.act[k]
		if t.g.NormOutput {
			// norm(out) feeds the lm_head and, through dH, the next step;
			// out only the norm.
			dev.Add(st.dfn.RowRange(0, R), dH)
			dev.Zero(dOut)
		} else {
			// out feeds the final norm (-> lm_head) and, through dH, the next step.
			dev.Copy(dOut, dH)
		}
		t.layer.NormBackward(dev, t.grW, dOut, st.dfn, st.Out.RowRange(0, R))
		t.gatherEmbed(st.tok)
		t.attn.Step = k
		// Step k's key and value gradients are complete when it runs: steps
		// k..T-1 have all added their share.
		t.layer.Backward(dev, t.grW, st.Acts, dOut, dH, R, t.attn, t.grads)
	}
	// Step 0's hidden input is fc(feature), after the norms before fc
	// where the draft has them; the features are not trained.
	t.layer.FCBackward(dev, t.grW, dH, t.feat.RowRange(0, R), t.fcActs)
}

// gatherEmbed gathers the frozen target embedding rows of tok into t.e
// (zeros for rows past the end of their sequence, id -1).
func (t *net) gatherEmbed(tok []int32) {
	ids := t.ids[:t.rows]
	for r, id := range tok[:t.rows] {
		ids[r] = max(int(id), 0)
	}
	t.dev.Gather(t.e.RowRange(0, t.rows), &t.embed, ids)
	for r, id := range tok[:t.rows] {
		if id < 0 {
			t.dev.Zero(t.e.RowRange(r, r+1))
		}
	}
}

// FLOPsPerToken is the matrix-multiply work of one training token, the figure
// behind the reported GFLOP/s: fc runs forward and weight-gradient (2 passes)
// once per token; each of the steps unrolled steps runs the q/k/v/o, MLP and
// lm_head products forward, input-gradient and weight-gradient (3 passes):
//
//	2*(2*3H*H) + steps*3*2*(2H*(nq+2nkv)*hd + nq*hd*H + 3*H*I + H*N)
//
// Attention scores, the target-distribution product and element-wise work are
// not counted.
func FLOPsPerToken(g deagle3.Geometry, steps int) float64 {
	h := float64(g.Hidden)
	fc := 2 * 2 * 3 * h * h
	per := 2*h*float64(g.QDim()+2*g.KVDim()) + float64(g.QDim())*h + 3*h*float64(g.Intermediate) + h*float64(g.DraftVocab)
	return fc + float64(steps)*3*2*per
}
