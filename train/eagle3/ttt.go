package eagle3

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/dataset"
)

// Target is what the trainer needs of the frozen target model: its geometry
// (Hidden, heads, ... of the draft layer; DraftVocab is filled in by the
// trainer), its input embedding [V, H] and its lm_head [V, H] (the embedding
// again when the target ties them).
type Target struct {
	Geometry Geometry
	Embed    []float32
	LMHead   []float32
}

// stepAct holds what one unrolled step keeps for its backward pass.
type stepAct struct {
	hIn      []float32 // [R,H] the step's hidden input (fc output, or the previous step's out)
	x        []float32 // [R,2H] cat(input_layernorm(emb), hidden_norm(hIn))
	q, k, v  []float32 // RoPE'd queries and keys, values
	o        []float32 // attention output, before o_proj
	lse      []float32 // [R,nq] attention log-sum-exp
	a1       []float32 // hIn + o_proj(o)
	n2       []float32 // post_attention_layernorm(a1)
	gate, up []float32 // [R,I]
	out      []float32 // [R,H] a1 + mlp(n2): the pre-norm output, next step's hIn
	dfn      []float32 // [R,H] gradient at norm(out), from the lm_head
	tok      []int32   // input token per row (-1: past the end, zero embedding)
	pos      []int32   // RoPE position per row: sequence position + step
	w        []float32 // loss weight per row: decay^k / count_k, 0 when not kept
	pred     []int32   // draft argmax (draft index) per row
}

// net is the unrolled draft with every buffer for a batch of up to maxRows
// tokens in sequences of at most maxLen.
type net struct {
	g      Geometry
	steps  int
	decay  float64
	be     tensor.Backend
	a      attnShape
	rope   *nn.RoPE
	p, gr  *Params
	embed  []float32
	head   []float32
	vocab  *Vocab
	maxRow int
	maxLen int
	invTau float64 // 1/τ: the target distribution is softmax(logits·invTau)

	// The batch.
	rows   int
	seqs   []span
	feat   []float32 // [R,3H]
	fcOut  []float32 // [R,H]
	tokens []int32   // [R]
	mask   []bool    // [R]
	pT     []float32 // [(R+steps+1), N] target distribution over the draft vocab, per row
	tgtID  []int32   // [R] target argmax over the full vocabulary
	act    []stepAct

	// Per-step statistics of the last forward.
	lossK    []float64 // mean soft cross-entropy over kept rows
	countK   []int     // kept rows
	maskedK  []int     // rows whose predicted token is a response token
	correctK []int     // of those, rows where draft argmax == target argmax

	keys, vals, dkeys, dvals [][]float32

	// Scratch.
	e, xe, xh, fn, dOut, dA1, dN2, dH, dxe, dxh []float32 // [R,H]
	dx                                          []float32 // [R,2H]
	dq, dO                                      []float32 // [R,qw]
	actBuf, dAct, dGate, dUp                    []float32 // [R,I]
	logits                                      []float32 // [R,N]
	full                                        []float32 // [prepRows,V]
	S, dP, pe                                   []float32
}

const prepRows = 64

// newNet allocates every buffer once.
func newNet(g Geometry, steps int, decay float64, be tensor.Backend, p *Params, embed, head []float32, vocab *Vocab, maxRows, maxLen int, withGrad bool) (*net, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if steps < 1 {
		return nil, fmt.Errorf("eagle3: the TTT unroll needs at least one step, got %d", steps)
	}
	maxPos := g.MaxPositions
	if maxPos < maxLen+steps {
		maxPos = maxLen + steps
	}
	rope, err := nn.NewRoPE(g.HeadDim, g.RopeTheta, g.RopeScaling, maxPos)
	if err != nil {
		return nil, fmt.Errorf("eagle3: draft RoPE: %w", err)
	}
	h, qw, kw, I, N, V := g.Hidden, g.qDim(), g.kvDim(), g.Intermediate, g.DraftVocab, g.Vocab
	R := maxRows
	t := &net{g: g, steps: steps, decay: decay, be: be, rope: rope, p: p, embed: embed, head: head, vocab: vocab,
		maxRow: maxRows, maxLen: maxLen, invTau: 1,
		a: attnShape{nq: g.Heads, nkv: g.KVHeads, hd: g.HeadDim, scale: float32(1 / math.Sqrt(float64(g.HeadDim)))}}
	if withGrad {
		t.gr = newParams(g)
	}
	f := func(n int) []float32 { return make([]float32, n) }
	t.feat, t.fcOut = f(R*3*h), f(R*h)
	t.tokens, t.mask, t.tgtID = make([]int32, R), make([]bool, R), make([]int32, R)
	t.pT = f((R + steps + 1) * N)
	t.act = make([]stepAct, steps)
	for k := range t.act {
		s := &t.act[k]
		s.x, s.q, s.k, s.v, s.o = f(R*2*h), f(R*qw), f(R*kw), f(R*kw), f(R*qw)
		s.lse, s.a1, s.n2, s.gate, s.up, s.out = f(R*g.Heads), f(R*h), f(R*h), f(R*I), f(R*I), f(R*h)
		s.tok, s.pos, s.w, s.pred = make([]int32, R), make([]int32, R), f(R), make([]int32, R)
		if withGrad {
			s.dfn = f(R * h)
		}
		t.keys = append(t.keys, s.k)
		t.vals = append(t.vals, s.v)
		if withGrad {
			t.dkeys = append(t.dkeys, f(R*kw))
			t.dvals = append(t.dvals, f(R*kw))
		}
	}
	t.lossK, t.countK, t.maskedK, t.correctK = make([]float64, steps), make([]int, steps), make([]int, steps), make([]int, steps)
	t.e, t.xe, t.xh, t.fn = f(R*h), f(R*h), f(R*h), f(R*h)
	t.actBuf, t.logits, t.full = f(R*I), f(R*N), f(prepRows*V)
	t.S, t.pe = f(maxLen*maxLen), f(maxLen*(steps+1))
	if withGrad {
		t.dOut, t.dA1, t.dN2, t.dH, t.dxe, t.dxh = f(R*h), f(R*h), f(R*h), f(R*h), f(R*h), f(R*h)
		t.dx, t.dq, t.dO = f(R*2*h), f(R*qw), f(R*qw)
		t.dAct, t.dGate, t.dUp = f(R*I), f(R*I), f(R*I)
		t.dP = f(maxLen * maxLen)
	}
	return t, nil
}

// load packs samples (each truncated to maxLen tokens) into the batch buffers,
// computes the target distributions, and the per-step tokens, positions and
// loss weights. The caller guarantees the total fits in maxRows.
//
// Alignment (formats.md): at step k, row i of a sequence of n tokens feeds the
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
	t.seqs = t.seqs[:0]
	t.rows = 0
}

// fits reports whether a sample of n tokens (before truncation) still fits.
func (t *net) fits(n int) bool { return t.rows+min(n, t.maxLen) <= t.maxRow }

// add copies one sample (truncated to maxLen) into the batch, so the caller may
// reuse the sample's buffers afterwards.
func (t *net) add(s *dataset.Sample) error {
	h := t.g.Hidden
	si := len(t.seqs)
	r := t.rows
	n := min(len(s.Tokens), t.maxLen)
	if len(s.LossMask) != len(s.Tokens) || len(s.Final) != len(s.Tokens)*h {
		return fmt.Errorf("eagle3: batch sample %d: %d tokens need %d loss-mask entries and %d final-state values, got %d and %d",
			si, len(s.Tokens), len(s.Tokens), len(s.Tokens)*h, len(s.LossMask), len(s.Final))
	}
	for c := range s.Features {
		if len(s.Features[c]) != len(s.Tokens)*h {
			return fmt.Errorf("eagle3: batch sample %d: feature %d has %d values, want %d tokens x hidden %d", si, c, len(s.Features[c]), len(s.Tokens), h)
		}
	}
	if r+n > t.maxRow {
		return fmt.Errorf("eagle3: batch of %d+ tokens exceeds the %d-token buffers", r+n, t.maxRow)
	}
	for i := 0; i < n; i++ {
		dst := t.feat[(r+i)*3*h : (r+i+1)*3*h]
		for c := range s.Features {
			copy(dst[c*h:(c+1)*h], s.Features[c][i*h:(i+1)*h])
		}
		id := s.Tokens[i]
		if id < 0 || int(id) >= t.g.Vocab {
			return fmt.Errorf("eagle3: batch sample %d token %d is id %d, outside the target vocabulary [0, %d)", si, i, id, t.g.Vocab)
		}
		t.tokens[r+i] = id
		t.mask[r+i] = s.LossMask[i]
	}
	t.targetDist(s.Final[:n*h], r, n)
	t.seqs = append(t.seqs, span{r, n})
	t.rows = r + n
	return nil
}

// finish derives the per-step tokens, positions and loss weights.
func (t *net) finish() {
	r := t.rows
	clear(t.pT[r*t.g.DraftVocab:])
	for k := range t.act {
		st := &t.act[k]
		count, masked := 0, 0
		for _, sp := range t.seqs {
			for i := 0; i < sp.n; i++ {
				row := sp.start + i
				st.tok[row], st.pos[row], st.w[row] = -1, int32(i+k), 0
				if i+1+k < sp.n {
					st.tok[row] = t.tokens[row+1+k]
				}
				if i+2+k < sp.n && t.mask[row+2+k] {
					masked++
					if t.vocab.Index[t.tgtID[row+1+k]] >= 0 {
						st.w[row] = 1
						count++
					}
				}
			}
		}
		t.countK[k], t.maskedK[k] = count, masked
		if count > 0 {
			wk := float32(math.Pow(t.decay, float64(k)) / float64(count))
			for row := 0; row < r; row++ {
				if st.w[row] != 0 {
					st.w[row] = wk
				}
			}
		}
	}
}

// targetDist computes, for n rows of final states starting at batch row r0,
// the target's full-vocabulary argmax and its softmax at temperature 1/invTau
// restricted to the draft vocabulary and renormalised (the frozen target
// lm_head applied to the post-norm state), in chunks of prepRows rows.
func (t *net) targetDist(final []float32, r0, n int) {
	h, V, N := t.g.Hidden, t.g.Vocab, t.g.DraftVocab
	ids := t.vocab.IDs
	for c := 0; c < n; c += prepRows {
		m := min(prepRows, n-c)
		tensor.MatMulT(t.be, t.full[:m*V], final[c*h:(c+m)*h], t.head, m, V, h)
		tensor.Parallel(m, 4, func(lo, hi int) {
			for j := lo; j < hi; j++ {
				lg := t.full[j*V : (j+1)*V]
				best := 0
				for v, x := range lg {
					if x > lg[best] {
						best = v
					}
				}
				row := r0 + c + j
				t.tgtID[row] = int32(best)
				p := t.pT[row*N : (row+1)*N]
				mx := float32(math.Inf(-1))
				for i, id := range ids {
					p[i] = lg[id]
					if p[i] > mx {
						mx = p[i]
					}
				}
				var sum float64
				for i, x := range p {
					e := float32(math.Exp(float64(x-mx) * t.invTau))
					p[i] = e
					sum += float64(e)
				}
				inv := float32(1 / sum)
				for i := range p {
					p[i] *= inv
				}
			}
		})
	}
}

// forward runs the unrolled draft over the loaded batch and returns the loss
// (sum over steps of decay^k times the step's mean soft cross-entropy). With
// grad it also back-propagates each step's loss through the draft lm_head
// right away (into gr.LMHead and the step's dfn), so no [R, N] logits are kept.
func (t *net) forward(grad bool) float64 {
	g, p, be := t.g, t.p, t.be
	R, h, qw, kw, I, N := t.rows, g.Hidden, g.qDim(), g.kvDim(), g.Intermediate, g.DraftVocab
	eps := float32(g.RMSNormEps)
	nn.Linear(be, t.fcOut, t.feat, p.FC, nil, R, 3*h, h)
	hIn := t.fcOut
	var total float64
	for k := range t.act {
		st := &t.act[k]
		st.hIn = hIn
		t.gatherEmbed(st.tok)
		nn.RMSNorm(t.xe, t.e, p.InputNorm, R, h, eps)
		nn.RMSNorm(t.xh, hIn, p.HiddenNorm, R, h, eps)
		interleave(st.x, t.xe, t.xh, R, h)
		nn.Linear(be, st.q, st.x, p.Q, nil, R, 2*h, qw)
		nn.Linear(be, st.k, st.x, p.K, nil, R, 2*h, kw)
		nn.Linear(be, st.v, st.x, p.V, nil, R, 2*h, kw)
		t.rope.Forward(st.q, R, g.Heads, st.pos)
		t.rope.Forward(st.k, R, g.KVHeads, st.pos)
		attentionForward(be, t.a, st.o, st.lse, st.q, t.keys[:k+1], t.vals[:k+1], t.seqs, t.S, t.pe)
		nn.Linear(be, st.a1, st.o, p.O, nil, R, qw, h)
		add(st.a1[:R*h], hIn)
		nn.RMSNorm(st.n2, st.a1, p.PostNorm, R, h, eps)
		nn.Linear(be, st.gate, st.n2, p.Gate, nil, R, h, I)
		nn.Linear(be, st.up, st.n2, p.Up, nil, R, h, I)
		nn.SwiGLU(t.actBuf[:R*I], st.gate[:R*I], st.up[:R*I])
		nn.Linear(be, st.out, t.actBuf, p.Down, nil, R, I, h)
		add(st.out[:R*h], st.a1)
		nn.RMSNorm(t.fn, st.out, p.Norm, R, h, eps)
		nn.Linear(be, t.logits, t.fn, p.LMHead, nil, R, h, N)
		t.score(k)
		var dl []float32
		if grad {
			dl = t.logits
		}
		lk := nn.SoftCrossEntropy(t.logits, R, N, t.pT[(1+k)*N:], st.w, dl)
		total += lk
		t.lossK[k] = lk / math.Pow(t.decay, float64(k))
		if grad {
			clear(st.dfn[:R*h])
			nn.LinearBackward(be, st.dfn, t.gr.LMHead, nil, t.logits, t.fn, p.LMHead, R, h, N)
		}
		hIn = st.out
	}
	return total
}

// score records step k's draft argmax per row and counts the rows where it
// matches the target's argmax among rows whose predicted token is a response
// token (a target argmax outside the draft vocabulary counts as a miss).
func (t *net) score(k int) {
	st := &t.act[k]
	N := t.g.DraftVocab
	tensor.Parallel(t.rows, 8, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			lg := t.logits[r*N : (r+1)*N]
			best := 0
			for v, x := range lg {
				if x > lg[best] {
					best = v
				}
			}
			st.pred[r] = int32(best)
		}
	})
	correct := 0
	for _, sp := range t.seqs {
		for i := 0; i+2+k < sp.n; i++ {
			r := sp.start + i
			if t.mask[r+2+k] && t.vocab.IDs[st.pred[r]] == t.tgtID[r+1+k] {
				correct++
			}
		}
	}
	t.correctK[k] = correct
}

// backward back-propagates the loss of the last forward(true) through the
// unroll, from the last step to the first, accumulating into t.gr.
func (t *net) backward() {
	g, p, gr, be := t.g, t.p, t.gr, t.be
	R, h, qw, kw, I := t.rows, g.Hidden, g.qDim(), g.kvDim(), g.Intermediate
	eps := float32(g.RMSNormEps)
	clear(t.dH[:R*h])
	for k := range t.act {
		clear(t.dkeys[k][:R*kw])
		clear(t.dvals[k][:R*kw])
	}
	for k := t.steps - 1; k >= 0; k-- {
		st := &t.act[k]
		// out feeds the final norm (-> lm_head) and, through dH, the next step.
		copy(t.dOut[:R*h], t.dH[:R*h])
		nn.RMSNormBackward(t.dOut, gr.Norm, st.dfn, st.out, p.Norm, R, h, eps)
		// out = a1 + down(swiglu(gate(n2), up(n2))).
		nn.SwiGLU(t.actBuf[:R*I], st.gate[:R*I], st.up[:R*I])
		clear(t.dAct[:R*I])
		nn.LinearBackward(be, t.dAct, gr.Down, nil, t.dOut, t.actBuf, p.Down, R, I, h)
		clear(t.dGate[:R*I])
		clear(t.dUp[:R*I])
		nn.SwiGLUBackward(t.dGate[:R*I], t.dUp[:R*I], t.dAct[:R*I], st.gate[:R*I], st.up[:R*I])
		clear(t.dN2[:R*h])
		nn.LinearBackward(be, t.dN2, gr.Gate, nil, t.dGate, st.n2, p.Gate, R, h, I)
		nn.LinearBackward(be, t.dN2, gr.Up, nil, t.dUp, st.n2, p.Up, R, h, I)
		copy(t.dA1[:R*h], t.dOut[:R*h])
		nn.RMSNormBackward(t.dA1, gr.PostNorm, t.dN2, st.a1, p.PostNorm, R, h, eps)
		// a1 = hIn + o_proj(o): the residual carries dA1 straight to hIn.
		clear(t.dO[:R*qw])
		nn.LinearBackward(be, t.dO, gr.O, nil, t.dA1, st.o, p.O, R, qw, h)
		copy(t.dH[:R*h], t.dA1[:R*h])
		clear(t.dq[:R*qw])
		attentionBackward(be, t.a, t.dq, t.dkeys[:k+1], t.dvals[:k+1], t.dO, st.o, st.lse, st.q, t.keys[:k+1], t.vals[:k+1], t.seqs, t.S, t.dP, t.pe)
		// dkeys[k] is complete now: steps k..T-1 have all added their share.
		t.rope.Backward(t.dq, R, g.Heads, st.pos)
		t.rope.Backward(t.dkeys[k], R, g.KVHeads, st.pos)
		clear(t.dx[:R*2*h])
		nn.LinearBackward(be, t.dx, gr.Q, nil, t.dq, st.x, p.Q, R, 2*h, qw)
		nn.LinearBackward(be, t.dx, gr.K, nil, t.dkeys[k], st.x, p.K, R, 2*h, kw)
		nn.LinearBackward(be, t.dx, gr.V, nil, t.dvals[k], st.x, p.V, R, 2*h, kw)
		deinterleave(t.dxe, t.dxh, t.dx, R, h)
		t.gatherEmbed(st.tok)
		nn.RMSNormBackward(nil, gr.InputNorm, t.dxe, t.e, p.InputNorm, R, h, eps)
		nn.RMSNormBackward(t.dH, gr.HiddenNorm, t.dxh, st.hIn, p.HiddenNorm, R, h, eps)
	}
	// Step 0's hidden input is fc(feature); the features are not trained.
	nn.LinearBackward(be, nil, gr.FC, nil, t.dH, t.feat, p.FC, R, 3*h, h)
}

// gatherEmbed copies the frozen target embedding rows of tok into t.e (zeros
// for rows past the end of their sequence).
func (t *net) gatherEmbed(tok []int32) {
	h := t.g.Hidden
	for r := 0; r < t.rows; r++ {
		dst := t.e[r*h : (r+1)*h]
		if id := tok[r]; id >= 0 {
			copy(dst, t.embed[int(id)*h:(int(id)+1)*h])
		} else {
			clear(dst)
		}
	}
}

// interleave writes rows [a_r | b_r] of width 2h.
func interleave(dst, a, b []float32, rows, h int) {
	for r := 0; r < rows; r++ {
		copy(dst[2*r*h:(2*r+1)*h], a[r*h:(r+1)*h])
		copy(dst[(2*r+1)*h:(2*r+2)*h], b[r*h:(r+1)*h])
	}
}

// deinterleave splits rows of width 2h into their halves.
func deinterleave(a, b, src []float32, rows, h int) {
	for r := 0; r < rows; r++ {
		copy(a[r*h:(r+1)*h], src[2*r*h:(2*r+1)*h])
		copy(b[r*h:(r+1)*h], src[(2*r+1)*h:(2*r+2)*h])
	}
}

func add(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
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
func FLOPsPerToken(g Geometry, steps int) float64 {
	h := float64(g.Hidden)
	fc := 2 * 2 * 3 * h * h
	per := 2*h*float64(g.qDim()+2*g.kvDim()) + float64(g.qDim())*h + 3*h*float64(g.Intermediate) + h*float64(g.DraftVocab)
	return fc + float64(steps)*3*2*per
}
