// Package dspark trains a DSpark draft (pkg/drafters/dspark) on captured
// target hidden states: DFlash's backbone (pkg/drafters/dflash's Net, whose
// passes it reuses as they are) under DSpark's shifted labels, with the
// low-rank Markov head and the confidence head on its outputs and DeepSpec's
// combined loss 0.1·CE + 0.9·L1 + 1.0·BCE, through the shared loop
// (train/loop). Blocks are drawn per sequence as DeepSpec draws them
// (anchors where the anchor and its first label are response tokens; the
// strict j < p context mask; attention within the own block).
package dspark

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
	ddspark "github.com/drafter-ai/drafter/pkg/drafters/dspark"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
	tdflash "github.com/drafter-ai/drafter/train/dflash"
	"github.com/drafter-ai/drafter/train/loop"
	"github.com/drafter-ai/drafter/train/optim"
)

// Inputs are what Train trains from besides its options: train/dflash's,
// as DSpark trains DFlash's backbone on the same target and data (which
// must hold Final as well: the L1 and confidence targets).
type Inputs = tdflash.Inputs

// Files Train writes besides the loop's.
const (
	// ExportDir is the export's subfolder.
	ExportDir = "dspark"
	// ProvenanceFile is drafter.json.
	ProvenanceFile = drafters.ProvenanceFile
)

// EvalMetrics are a held-out evaluation.
type EvalMetrics struct {
	// EvalStamp says when the evaluation ran (train/dflash's).
	tdflash.EvalStamp
	// Loss is the training objective; CE, L1 and BCE its terms (weighted
	// means, before the loss weights).
	Loss, CE, L1, BCE float64
	// Accuracy[k] is slot k's top-1 accuracy (Markov bias from the
	// ground-truth previous token) over its weighted rows; Alpha[k] its
	// mean α = 1 - ½‖p_d - p_t‖₁ and ConfError[k] the mean |σ(c_k) - α*_k|.
	Accuracy, Alpha, ConfError []float64
	// AcceptLen is the simulated greedy acceptance length per block: 1 +
	// the mean number of leading slots whose top-1 is the label; TauProb
	// DeepSpec's probabilistic one, 1 + Σ_k Π_{j≤k} α_j.
	AcceptLen, TauProb float64
	Blocks             int
}

// Better is a lower held-out loss.
func (m *EvalMetrics) Better(b *EvalMetrics) bool { return m.Loss < b.Loss }

// Record is the metrics.jsonl line.
func (m *EvalMetrics) Record(best bool) any {
	return map[string]any{"kind": "eval", "epoch": m.Epoch, "step": m.Step, "loss": m.Loss, "ce": m.CE, "l1": m.L1, "bce": m.BCE,
		"accuracy": m.Accuracy, "alpha": m.Alpha, "confidence_abs_error": m.ConfError, "accept_len": m.AcceptLen,
		"tau_prob": m.TauProb, "blocks": m.Blocks, "train_loss": m.TrainLoss, "elapsed_s": m.ElapsedSec, "best": best}
}

// Summary is the progress line.
func (m *EvalMetrics) Summary() string {
	return fmt.Sprintf("eval step %d: loss %.4f (ce %.3f, l1 %.3f, bce %.3f), simulated acceptance %.3f (probabilistic %.3f), slot accuracy %s",
		m.Step, m.Loss, m.CE, m.L1, m.BCE, m.AcceptLen, m.TauProb, loop.FormatFloats(m.Accuracy))
}

// Result is what Train did.
type Result struct {
	loop.Result[*EvalMetrics]
	Draft     *ddspark.Draft
	ExportDir string
	// Calibration is what drafter.json records as confidence_calibration
	// (nil when it records none).
	Calibration *ddspark.Calibration
}

// provenance is drafter.json.
type provenance struct {
	Method            string            `json:"method"`
	Formats           []string          `json:"formats"`
	Format            string            `json:"format"`
	Hidden            int               `json:"hidden_size"`
	Vocab             int               `json:"vocab_size"`
	FeatureLayers     []int             `json:"feature_layers"`
	BlockSize         int               `json:"block_size"`
	MaskToken         int               `json:"mask_token_id"`
	DraftLayers       int               `json:"draft_layers"`
	Causal            bool              `json:"causal"`
	MarkovRank        int               `json:"markov_rank"`
	Confidence        bool              `json:"enable_confidence_head"`
	ConfWithMarkov    bool              `json:"confidence_head_with_markov"`
	Loss              LossWeights       `json:"loss"`
	Gamma             float64           `json:"gamma"`
	Anchors           int               `json:"anchors"`
	BaseModel         string            `json:"base_model_name_or_path,omitempty"`
	TargetFingerprint string            `json:"target_fingerprint"`
	TargetLayers      int               `json:"target_num_hidden_layers,omitempty"`
	DataManifests     map[string]string `json:"data_manifests"`
	Args              any               `json:"args"`
	Steps             int               `json:"steps"`
	Stopped           string            `json:"stopped"`
	Metrics           *EvalMetrics      `json:"metrics,omitempty"`
	// Calibration is the confidence head's STS temperatures fitted on the
	// held-out blocks under the exported weights (absent without a
	// confidence head or held-out blocks).
	Calibration *ddspark.Calibration `json:"confidence_calibration,omitempty"`
}

// Train trains a DSpark draft with the shared loop and exports it into
// job.Out/dspark, with drafter.json and SHA256SUMS beside it.
func Train(ctx context.Context, o Options, in Inputs, job *loop.Job) (*Result, error) {
	t, err := newTrainer(o, in)
	if err != nil {
		return nil, err
	}
	lc := tdflash.LoopConfig(o.Training, string(ddspark.Kind), t.o, in.Resume, o.Progress)
	r, err := loop.Run(ctx, lc, job, t)
	if err != nil {
		return nil, err
	}
	return &Result{Result: *r, Draft: t.draft(), ExportDir: filepath.Join(job.Out, ExportDir), Calibration: t.calib}, nil
}

// trainer is the DSpark side of the loop (loop.Trainer).
type trainer struct {
	o      Options
	in     Inputs
	g      dflash.Geometry
	decay  []float32
	dev    tensor.Device
	w, gw  *dflash.Weights[float32]
	net    *dflash.Net[float32]
	hw, hg *ddspark.Heads // the heads and their gradients
	markov *ddspark.Markov
	conf   *ddspark.Confidence
	cacts  *ddspark.ConfActs
	csc    *ddspark.ConfScratch
	loss   *loss
	params []optim.Param
	*tdflash.Schedule

	batch []*seqBatch
	smp   dataset.Sample
	// The step's slot counts, for its metrics.jsonl line.
	correct, counted []int
	// Scratch over the most rows of a sequence (Anchors·B).
	logits, pT, e, c, dc, dY, dE []float32
	ones                         []float32
	pred                         []int32
	maxRows                      int
	// calib is the calibration Export fitted and wrote.
	calib *ddspark.Calibration
}

// seqBatch is one sequence's blocks, ready for the passes.
type seqBatch struct {
	feat   []float32 // [S, F*H] context features
	pos    []int     // 0..S-1
	emb    []float32 // [R, Hd] block embeddings
	final  []float32 // [R, H] the target's final-norm state at each row's target position p+k
	blocks []dflash.Block
	labels []int32   // per row, -1 past the end
	prev   []int32   // per row, the Markov head's previous token
	w      []float32 // per row
	wsum   float64
}

func newTrainer(o Options, in Inputs) (*trainer, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	c, ds := in.Config, in.Data
	if err := tdflash.CheckInputs(c, ds, in.Embed, in.LMHead); err != nil {
		return nil, fmt.Errorf("dspark: %w", err)
	}
	if len(in.Layers) == 0 {
		return nil, fmt.Errorf("dspark: no feature layers to fuse")
	}
	t := &trainer{o: o, in: in, dev: cpu.New(nil), decay: slotDecay(o.BlockSize, o.Gamma), Schedule: tdflash.NewSchedule(o.Training, ds.NumSamples())}
	if t.o.MaskToken < 0 {
		var err error
		if t.o.MaskToken, err = tdflash.LeastFrequent(ds, t.TrainIdx, c.VocabSize); err != nil {
			return nil, fmt.Errorf("dspark: %w", err)
		}
	}
	t.g = dflash.TargetGeometry(c, o.DraftLayers, len(in.Layers), o.BlockSize, t.o.MaskToken)
	if o.Intermediate > 0 {
		t.g.Intermediate = o.Intermediate
	}
	if err := t.g.Validate(); err != nil {
		return nil, err
	}
	var err error
	if t.w, err = dflash.NewWeights[float32](t.g, nil); err != nil {
		return nil, err
	}
	if t.gw, err = dflash.NewWeights[float32](t.g, nil); err != nil {
		return nil, err
	}
	sh := o.headShape()
	V, Hd := t.g.Vocab, t.g.Hidden
	if t.hw, err = ddspark.NewHeads(sh, V, Hd, nil); err != nil {
		return nil, err
	}
	if t.hg, err = ddspark.NewHeads(sh, V, Hd, nil); err != nil {
		return nil, err
	}
	initWeights(t.w, t.g, t.hw, o.Seed)
	t.net = dflash.NewNet(t.g, t.w, t.gw)
	if err := t.buildHeads(); err != nil {
		return nil, err
	}
	if t.params, err = tdflash.BackboneParams(t.dev, t.g, t.w, t.gw); err != nil {
		return nil, fmt.Errorf("dspark: %w", err)
	}
	hgrads := t.hg.Tensors()
	for i, w := range t.hw.Tensors() {
		p, err := tdflash.NewParam(t.dev, w.Name, w.Shape, w.Data, hgrads[i].Data)
		if err != nil {
			return nil, fmt.Errorf("dspark: %w", err)
		}
		t.params = append(t.params, p)
	}
	t.maxRows = o.Anchors * o.BlockSize
	if t.loss, err = newLoss(t.dev, o.Loss, t.maxRows, V, true); err != nil {
		return nil, err
	}
	R, r := t.maxRows, max(sh.Rank, 1)
	t.logits, t.pT, t.e, t.c, t.dc = make([]float32, R*V), make([]float32, R*V), make([]float32, R*r), make([]float32, R), make([]float32, R)
	t.dY, t.dE, t.ones, t.pred = make([]float32, R*Hd), make([]float32, R*r), make([]float32, R), make([]int32, R)
	for i := range t.ones {
		t.ones[i] = 1
	}
	t.correct, t.counted = make([]int, o.BlockSize), make([]int, o.BlockSize)
	return t, nil
}

// buildHeads makes the heads' layers over the trainer's weight slices.
func (t *trainer) buildHeads() error {
	sh, V, Hd := t.hw.Shape, t.g.Vocab, t.g.Hidden
	if sh.Rank > 0 {
		t.markov = &ddspark.Markov{W1: cpu.HostTensor(t.hw.W1, V, sh.Rank), W2: cpu.HostTensor(t.hw.W2, V, sh.Rank)}
	}
	if !sh.Confidence {
		return nil
	}
	proj, err := nn.NewLinear(t.dev, tensor.F32Matrix(t.hw.ConfW, 1, sh.ConfIn(Hd)), t.hw.ConfB)
	if err != nil {
		return fmt.Errorf("dspark: confidence head: %w", err)
	}
	t.conf = &ddspark.Confidence{Proj: proj, WithMarkov: sh.WithMarkov}
	t.cacts, t.csc, err = t.conf.NewActs(t.dev, t.o.Anchors*t.o.BlockSize, Hd, sh.Rank, true)
	return err
}

// initWeights initialises from seed, all from one stream: the backbone as
// train/dflash does (InitBackbone: Qwen3's norms one, matrices
// N(0, 0.02²)), then the heads from where it left the stream; the Markov
// head's W1 as torch's nn.Embedding (N(0, 1)) and W2 zero, so that training
// starts from the plain shifted backbone and the bias grows from there (W2's
// gradient is non-zero from the first step; W1's follows); the confidence
// projection N(0, 0.02²), its bias zero.
func initWeights(w *dflash.Weights[float32], g dflash.Geometry, h *ddspark.Heads, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0xd5a4c))
	tdflash.InitBackbone(w, g, r)
	for i := range h.W1 {
		h.W1[i] = float32(r.NormFloat64())
	}
	clear(h.W2)
	for i := range h.ConfW {
		h.ConfW[i] = float32(r.NormFloat64() * 0.02)
	}
	clear(h.ConfB)
}

// Device is the CPU device the weights live on.
func (t *trainer) Device() tensor.Device { return t.dev }

// Params are the weights and gradients: the backbone's, then the heads'.
func (t *trainer) Params() []optim.Param { return t.params }

// Next reads the next update's sequences and draws their anchors.
func (t *trainer) Next() (bool, error) {
	t.batch = t.batch[:0]
	return t.NextBatch(func(i int, rng *rand.Rand) error {
		sb, err := t.read(i, rng)
		if sb != nil {
			t.batch = append(t.batch, sb)
		}
		return err
	})
}

// read reads sample i and builds its blocks (nil when it has no anchor).
func (t *trainer) read(i int, rng *rand.Rand) (*seqBatch, error) {
	g := t.g
	T, err := tdflash.ReadSample(t.in.Data, i, &t.smp, dataset.Features|dataset.Final, g.Features, g.Vocab, t.o.MaxLength)
	if err != nil {
		return nil, fmt.Errorf("dspark: %w", err)
	}
	s := &t.smp
	if len(s.LossMask) < T || len(s.Final) < T*g.TargetHidden {
		return nil, fmt.Errorf("dspark: sample %d: %d tokens need as many loss-mask entries (%d) and final-norm rows (%d values of width %d)", i, T, len(s.LossMask), len(s.Final), g.TargetHidden)
	}
	cand := tdflash.AnchorCandidates(nil, s.LossMask[:T], 0)
	anchors := sampleAnchors(nil, cand, t.o.Anchors, rng)
	if len(anchors) == 0 {
		return nil, nil
	}
	return t.buildBlocks(s, T, anchors)
}

// buildBlocks lays out one sequence's blocks for anchors (sorted): the
// context rows 0..maxAnchor-1 (the last anchor sees those), each block's
// embeddings [x_p, mask, ...], and slotRows' labels, prev tokens, weights
// and target rows (whose final-norm states it copies).
func (t *trainer) buildBlocks(s *dataset.Sample, T int, anchors []int) (*seqBatch, error) {
	g := t.g
	B, H, Hd := g.BlockSize, g.TargetHidden, g.Hidden
	feat, pos, err := tdflash.ContextRows(s.Features[:g.Features], T, anchors[len(anchors)-1], H)
	if err != nil {
		return nil, fmt.Errorf("dspark: %w", err)
	}
	sb := &seqBatch{feat: feat, pos: pos}
	R := len(anchors) * B
	sb.emb, sb.final = make([]float32, R*Hd), make([]float32, R*H)
	sb.labels, sb.prev, sb.w = make([]int32, R), make([]int32, R), make([]float32, R)
	tgt := make([]int32, B)
	embed := t.in.Embed
	maskRow := embed[g.MaskToken*Hd : (g.MaskToken+1)*Hd]
	toks, mask := s.Tokens[:T], s.LossMask[:T]
	for b, p := range anchors {
		sb.blocks = append(sb.blocks, dflash.Block{Row0: b * B, Start: p, Ctx: p})
		r0 := b * B
		slotRows(toks, mask, p, t.decay, sb.labels[r0:r0+B], sb.prev[r0:r0+B], tgt, sb.w[r0:r0+B])
		tok := int(toks[p])
		copy(sb.emb[r0*Hd:(r0+1)*Hd], embed[tok*Hd:(tok+1)*Hd])
		for k := 1; k < B; k++ {
			copy(sb.emb[(r0+k)*Hd:(r0+k+1)*Hd], maskRow)
		}
		for k, pos := range tgt {
			copy(sb.final[(r0+k)*H:(r0+k+1)*H], s.Final[int(pos)*H:(int(pos)+1)*H])
		}
	}
	for _, v := range sb.w {
		sb.wsum += float64(v)
	}
	return sb, nil
}

// Step runs the passes over the batch: the loss is DSpark's combined loss
// normalised by Σw over all its sequences' blocks.
func (t *trainer) Step() (float64, int) {
	var wsum float64
	for _, sb := range t.batch {
		wsum += sb.wsum
	}
	clear(t.correct)
	clear(t.counted)
	if wsum == 0 {
		return 0, 0
	}
	var loss float64
	tokens := 0
	for _, sb := range t.batch {
		st, err := t.pass(sb, wsum, true, nil)
		if err != nil {
			return math.NaN(), 0
		}
		loss += st.Loss
		tokens += len(sb.pos)
	}
	return loss, tokens
}

// evalTally gathers an evaluation's counts.
type evalTally struct {
	correct, counted   []int
	alpha, confErr     []float64
	blocks, accepted   int
	tauProb            float64
	ce, l1, bce, lossW float64
}

// pass runs one sequence forward (and backward when grad), its terms
// normalised by norm; ev, when set, tallies the evaluation's counts.
func (t *trainer) pass(sb *seqBatch, norm float64, grad bool, ev *evalTally) (LossStats, error) {
	g, n := t.g, t.net
	if err := n.Context(sb.feat, sb.pos); err != nil {
		return LossStats{}, err
	}
	if err := n.Blocks(sb.emb, sb.blocks, n.Kc, n.Vc); err != nil {
		return LossStats{}, err
	}
	R, V, Hd, H := len(sb.labels), g.Vocab, g.Hidden, g.TargetHidden
	if R > t.maxRows {
		return LossStats{}, fmt.Errorf("dspark: %d block rows exceed the %d-row buffers", R, t.maxRows)
	}
	dev, host := t.dev, cpu.HostTensor
	r := max(t.hw.Shape.Rank, 1)
	Y, logits, e := host(n.Y[:R*Hd], R, Hd), host(t.logits[:R*V], R, V), host(t.e[:R*r], R, r)
	lmHead := host(t.in.LMHead, V, H)
	dev.MatMul(logits, Y, lmHead, false, true, 1, false)
	if t.markov != nil {
		t.markov.Forward(dev, logits, e, sb.prev)
	}
	var conf, dconf tensor.Tensor
	if t.conf != nil {
		conf, dconf = host(t.c[:R], R, 1), host(t.dc[:R], R, 1)
		t.conf.Forward(dev, conf, Y, e, t.cacts)
	}
	// The target distribution of each row's label: the frozen lm_head on
	// the target's final-norm state at the position before the label.
	pT := host(t.pT[:R*V], R, V)
	dev.MatMul(pT, host(sb.final, R, H), lmHead, false, true, 1, false)
	dev.Softmax(pT, 1)
	dev.ArgMax(t.pred[:R], logits)
	t.tally(sb, ev)
	var dl tensor.Tensor
	if grad {
		dl = logits // consumed: the loss writes its gradient over the logits
	} else {
		dconf = tensor.Tensor{}
	}
	st := t.loss.forward(dev, dl, dconf, logits, conf, pT, sb.labels, sb.w, norm)
	if ev != nil {
		t.tallyAlpha(sb, ev)
	}
	if !grad {
		return st, nil
	}
	dY := host(t.dY[:R*Hd], R, Hd)
	dev.MatMul(dY, dl, lmHead, false, false, 1, false)
	dE := host(t.dE[:R*r], R, r)
	dev.Zero(dE)
	if t.conf != nil {
		var dW, dB tensor.Tensor = host(t.hg.ConfW, 1, len(t.hg.ConfW)), host(t.hg.ConfB, 1, 1)
		t.conf.Backward(dev, dY, dE, dW, dB, dconf, Y, t.cacts, t.csc)
	}
	if t.markov != nil {
		rk := t.hw.Shape.Rank
		t.markov.Backward(dev, host(t.hg.W1, V, rk), host(t.hg.W2, V, rk), dE, dl, e, sb.prev, t.ones)
	}
	n.Backward(t.dY[:R*Hd])
	return st, nil
}

// tally counts the slots whose argmax is the label (rows of weight > 0),
// per slot and, for an evaluation, the leading correct slots per block.
func (t *trainer) tally(sb *seqBatch, ev *evalTally) {
	B := t.g.BlockSize
	for b := 0; b*B < len(sb.labels); b++ {
		lead := true
		for k := range B {
			r := b*B + k
			if sb.w[r] == 0 {
				break
			}
			hit := t.pred[r] == sb.labels[r]
			t.counted[k]++
			if hit {
				t.correct[k]++
			}
			if ev == nil {
				continue
			}
			ev.counted[k]++
			if hit {
				ev.correct[k]++
				if lead {
					ev.accepted++
				}
			} else {
				lead = false
			}
		}
		if ev != nil && sb.w[b*B] > 0 {
			ev.blocks++
		}
	}
}

// tallyAlpha adds the rows' α, confidence errors and the blocks'
// probabilistic acceptance 1 + Σ_k Π_{j≤k} α_j (over each block's weighted
// prefix) to ev.
func (t *trainer) tallyAlpha(sb *seqBatch, ev *evalTally) {
	B := t.g.BlockSize
	for b := 0; b*B < len(sb.labels); b++ {
		if sb.w[b*B] == 0 {
			continue
		}
		prod := 1.0
		ev.tauProb++
		for k := range B {
			r := b*B + k
			if sb.w[r] == 0 {
				break
			}
			a := min(max(t.loss.alpha[r], 0), 1)
			ev.alpha[k] += a
			prod *= a
			ev.tauProb += prod
			if t.conf != nil {
				ev.confErr[k] += math.Abs(1/(1+math.Exp(-float64(t.c[r]))) - a)
			}
		}
	}
}

// eachHeldOut runs every held-out sequence that has a weighted row through
// the current weights, its blocks drawn from a fixed stream (the same at
// every call), tallying into ev when set, and hands f the sequence and its
// loss terms (the pass's scratch, t.c, t.pred and t.loss, hold its rows).
func (t *trainer) eachHeldOut(ev *evalTally, f func(sb *seqBatch, st LossStats)) error {
	for _, i := range t.EvalIdx {
		sb, err := t.read(i, t.EvalRand(i))
		if err != nil {
			return err
		}
		if sb == nil || sb.wsum == 0 {
			continue
		}
		st, err := t.pass(sb, sb.wsum, false, ev)
		if err != nil {
			return err
		}
		f(sb, st)
	}
	return nil
}

// Evaluate runs the held-out samples with anchors drawn from a fixed
// stream (the same at every evaluation).
func (t *trainer) Evaluate(e loop.Eval) (*EvalMetrics, error) {
	B := t.g.BlockSize
	ev := &evalTally{correct: make([]int, B), counted: make([]int, B), alpha: make([]float64, B), confErr: make([]float64, B)}
	var wsum float64
	err := t.eachHeldOut(ev, func(sb *seqBatch, st LossStats) {
		ev.lossW += st.Loss * sb.wsum
		ev.ce += st.CE * sb.wsum
		ev.l1 += st.L1 * sb.wsum
		ev.bce += st.BCE * sb.wsum
		wsum += sb.wsum
	})
	if err != nil {
		return nil, err
	}
	m := &EvalMetrics{EvalStamp: tdflash.NewEvalStamp(e),
		Accuracy: make([]float64, B), Alpha: make([]float64, B), ConfError: make([]float64, B), Blocks: ev.blocks, AcceptLen: 1, TauProb: 1}
	if wsum > 0 {
		m.Loss, m.CE, m.L1, m.BCE = ev.lossW/wsum, ev.ce/wsum, ev.l1/wsum, ev.bce/wsum
	}
	for k := range B {
		if n := float64(ev.counted[k]); n > 0 {
			m.Accuracy[k], m.Alpha[k], m.ConfError[k] = float64(ev.correct[k])/n, ev.alpha[k]/n, ev.confErr[k]/n
		}
	}
	if ev.blocks > 0 {
		m.AcceptLen += float64(ev.accepted) / float64(ev.blocks)
		m.TauProb = ev.tauProb / float64(ev.blocks)
	}
	return m, nil
}

// TrainLine is a step's metrics.jsonl line with its slot accuracies.
func (t *trainer) TrainLine(s loop.StepStats) any {
	return tdflash.TrainLine(s, t.correct, t.counted)
}

// draft wraps the current weights as a draft.
func (t *trainer) draft() *ddspark.Draft {
	return &ddspark.Draft{Geometry: t.g, Params: t.w, Heads: t.hw, Embed: t.in.Embed, LMHead: t.in.LMHead,
		LayerIDs: append([]int(nil), t.in.Layers...), TargetLayers: t.in.Config.NumLayers, NumAnchors: t.o.Anchors}
}

// Export writes the draft into job.Out/dspark, drafter.json, then
// SHA256SUMS over them. The loop calls it after putting the best weights
// back, so the confidence calibration it fits into drafter.json is that of
// the weights exported.
func (t *trainer) Export(job *loop.Job, r *loop.Result[*EvalMetrics]) error {
	if err := drafters.RemoveSums(job.Out); err != nil {
		return err
	}
	calib, err := t.calibrate()
	if err != nil {
		return err
	}
	t.calib = calib
	if calib != nil && job.Report != nil {
		job.Report.Line(calibrationLine(calib))
	}
	d := t.draft()
	format := t.o.Format
	if format == "" {
		format = ddspark.FormatDeepSpec
	}
	opt := ddspark.ExportOptions{Format: format, TargetName: t.in.TargetName, TargetArchitectures: t.in.Config.Architectures}
	if err := ddspark.Export(filepath.Join(job.Out, ExportDir), d, opt); err != nil {
		return err
	}
	p := job.Provenance
	manifests := p.DataManifests
	if manifests == nil {
		manifests = map[string]string{}
	}
	g, sh := t.g, t.hw.Shape
	err = atomicfile.WriteJSON(filepath.Join(job.Out, ProvenanceFile), provenance{
		Method: string(ddspark.Kind), Formats: []string{ExportDir}, Format: format,
		Hidden: g.Hidden, Vocab: g.Vocab, FeatureLayers: d.LayerIDs, BlockSize: g.BlockSize, MaskToken: g.MaskToken,
		DraftLayers: g.Layers, MarkovRank: sh.Rank, Confidence: sh.Confidence, ConfWithMarkov: sh.WithMarkov,
		Loss: t.o.Loss, Gamma: t.o.Gamma, Anchors: t.o.Anchors,
		BaseModel: p.BaseModel, TargetFingerprint: p.TargetFingerprint, TargetLayers: p.TargetLayers, DataManifests: manifests,
		Args: p.Args, Steps: r.Steps, Stopped: r.Stopped, Metrics: r.Best, Calibration: calib,
	})
	if err != nil {
		return err
	}
	return drafters.WriteSums(job.Out, []string{ProvenanceFile, ExportDir + "/" + drafters.ConfigFile, ExportDir + "/model.safetensors"})
}
