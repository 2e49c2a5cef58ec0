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
	"sort"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
	ddspark "github.com/drafter-ai/drafter/pkg/drafters/dspark"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/loop"
	"github.com/drafter-ai/drafter/train/optim"
)

// Inputs are what Train trains from besides its options.
type Inputs struct {
	// Config is the target's config; Layers the fused HF indices.
	Config *checkpoint.Config
	Layers []int
	// Embed and LMHead are the target's embedding and lm_head, [V, H]
	// float32 each, frozen (and exported as the draft's own copies).
	Embed, LMHead []float32
	// Data holds tokens, loss masks, Final (the target's final-norm state)
	// and Features (one per Layers entry).
	Data dataset.Dataset
	// Resume continues the run in the job's output folder.
	Resume bool
	// TargetName names the verifier in the speculators layout.
	TargetName string
}

// Files Train writes besides the loop's.
const (
	// ExportDir is the export's subfolder.
	ExportDir = "dspark"
	// ProvenanceFile is drafter.json.
	ProvenanceFile = drafters.ProvenanceFile
)

// EvalMetrics are a held-out evaluation.
type EvalMetrics struct {
	Epoch      int     `json:"epoch"`
	Step       int     `json:"step"`
	ElapsedSec float64 `json:"elapsed_s"`
	TrainLoss  float64 `json:"train_loss"`
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
}

// Train trains a DSpark draft with the shared loop and exports it into
// job.Out/dspark, with drafter.json and SHA256SUMS beside it.
func Train(ctx context.Context, o Options, in Inputs, job *loop.Job) (*Result, error) {
	t, err := newTrainer(o, in)
	if err != nil {
		return nil, err
	}
	lc := loop.Config[*EvalMetrics]{Method: string(ddspark.Kind), Settings: t.o,
		LR: o.LR, MinLRRatio: o.MinLRRatio, ClipNorm: o.ClipNorm, MaxSteps: o.MaxSteps, Patience: o.Patience,
		EvalEvery: o.EvalEvery, CheckpointEvery: o.CheckpointEvery, LogEvery: o.LogEvery, Resume: in.Resume, Progress: o.Progress}
	r, err := loop.Run(ctx, lc, job, t)
	if err != nil {
		return nil, err
	}
	return &Result{Result: *r, Draft: t.draft(), ExportDir: filepath.Join(job.Out, ExportDir)}, nil
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

	trainIdx, evalIdx []int
	epochSteps        []int
	order             []int
	epoch, cursor     int

	batch []*seqBatch
	smp   dataset.Sample
	// The step's slot counts, for its metrics.jsonl line.
	correct, counted []int
	// Scratch over the most rows of a sequence (Anchors·B).
	logits, pT, e, c, dc, dY, dE []float32
	ones                         []float32
	pred                         []int32
	maxRows                      int
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
	if ds.Hidden() != c.HiddenSize {
		return nil, fmt.Errorf("dspark: the dataset's hidden states have width %d, the target's hidden_size is %d", ds.Hidden(), c.HiddenSize)
	}
	if len(in.Embed) != c.VocabSize*c.HiddenSize || len(in.LMHead) != c.VocabSize*c.HiddenSize {
		return nil, fmt.Errorf("dspark: target embedding has %d values and lm_head %d, want vocab %d x hidden %d each", len(in.Embed), len(in.LMHead), c.VocabSize, c.HiddenSize)
	}
	if len(in.Layers) == 0 {
		return nil, fmt.Errorf("dspark: no feature layers to fuse")
	}
	if ds.NumSamples() < 2 {
		return nil, fmt.Errorf("dspark: need at least 2 samples (one held out), got %d", ds.NumSamples())
	}
	t := &trainer{o: o, in: in, dev: cpu.New(nil), decay: slotDecay(o.BlockSize, o.Gamma)}
	perm := rand.New(rand.NewPCG(o.Seed, 1)).Perm(ds.NumSamples())
	nEval := min(max(1, int(math.Round(o.EvalFraction*float64(ds.NumSamples())))), ds.NumSamples()-1)
	t.evalIdx, t.trainIdx = append([]int(nil), perm[:nEval]...), append([]int(nil), perm[nEval:]...)
	sort.Ints(t.evalIdx)
	sort.Ints(t.trainIdx)
	if t.o.MaskToken < 0 {
		var err error
		if t.o.MaskToken, err = leastFrequent(ds, t.trainIdx, c.VocabSize); err != nil {
			return nil, err
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
	add := func(name string, shape []int, w, g []float32) error {
		rows, cols := 1, shape[0]
		if len(shape) == 2 {
			rows, cols = shape[0], shape[1]
		}
		d, err := t.dev.Upload(tensor.F32Matrix(w, rows, cols))
		if err != nil {
			return fmt.Errorf("dspark: %s: %w", name, err)
		}
		gr, err := t.dev.Upload(tensor.F32Matrix(g, rows, cols))
		if err != nil {
			return fmt.Errorf("dspark: %s: %w", name, err)
		}
		t.params = append(t.params, optim.Param{Name: name, Data: d, Grad: gr})
		return nil
	}
	grads := t.gw.Tensors(t.g)
	for i, w := range t.w.Tensors(t.g) {
		if err := add(w.Name, w.Shape, w.Data, grads[i].Data); err != nil {
			return nil, err
		}
	}
	hgrads := t.hg.Tensors()
	for i, w := range t.hw.Tensors() {
		if err := add(w.Name, w.Shape, w.Data, hgrads[i].Data); err != nil {
			return nil, err
		}
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
	steps := (len(t.trainIdx) + o.BatchSeqs - 1) / o.BatchSeqs
	for range o.Epochs {
		t.epochSteps = append(t.epochSteps, steps)
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

// leastFrequent returns the least frequent token of the training samples,
// the lowest id on ties: an id that (almost) never appears, whose embedding
// row the mask slots can own (train/dflash's rule, so that both methods
// choose the same mask token on the same data).
func leastFrequent(ds dataset.Dataset, idx []int, V int) (int, error) {
	counts := make([]int64, V)
	var s dataset.Sample
	for _, i := range idx {
		if err := ds.Sample(i, &s, dataset.TokensOnly); err != nil {
			return 0, fmt.Errorf("dspark: reading sample %d: %w", i, err)
		}
		for _, tok := range s.Tokens {
			if tok < 0 || int(tok) >= V {
				return 0, fmt.Errorf("dspark: sample %d holds token %d outside the vocabulary [0, %d)", i, tok, V)
			}
			counts[tok]++
		}
	}
	best := 0
	for v, n := range counts {
		if n < counts[best] {
			best = v
		}
	}
	return best, nil
}

// initWeights initialises from seed: the backbone as Transformers
// initialises a Qwen3 model (norms one, matrices N(0, 0.02²)); the Markov
// head's W1 as torch's nn.Embedding (N(0, 1)) and W2 zero, so that training
// starts from the plain shifted backbone and the bias grows from there (W2's
// gradient is non-zero from the first step; W1's follows); the confidence
// projection N(0, 0.02²), its bias zero.
func initWeights(w *dflash.Weights[float32], g dflash.Geometry, h *ddspark.Heads, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0xd5a4c))
	for _, t := range w.Tensors(g) {
		if len(t.Shape) == 1 {
			for i := range t.Data {
				t.Data[i] = 1
			}
			continue
		}
		for i := range t.Data {
			t.Data[i] = float32(r.NormFloat64() * 0.02)
		}
	}
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

// Plan: Epochs epochs of ceil(train/BatchSeqs) updates, WarmupFrac warm-up.
func (t *trainer) Plan() loop.Plan {
	total := 0
	for _, n := range t.epochSteps {
		total += n
	}
	return loop.Plan{EpochSteps: t.epochSteps, Warmup: int(math.Ceil(t.o.WarmupFrac * float64(total))), HeldOut: true,
		AdamW: optim.AdamWConfig{Beta1: 0.9, Beta2: t.o.Beta2, Eps: 1e-8, WeightDecay: t.o.WeightDecay}}
}

// Seek shuffles epoch's order (seeded) and starts at update pos.Cursor.
func (t *trainer) Seek(epoch int, pos loop.Position) error {
	t.order = append(t.order[:0], t.trainIdx...)
	rand.New(rand.NewPCG(t.o.Seed, uint64(epoch)+2)).Shuffle(len(t.order), func(a, b int) { t.order[a], t.order[b] = t.order[b], t.order[a] })
	t.epoch, t.cursor = epoch, pos.Cursor
	return nil
}

// Next reads the next update's sequences and draws their anchors.
func (t *trainer) Next() (bool, error) {
	lo := t.cursor * t.o.BatchSeqs
	if lo >= len(t.order) {
		return false, nil
	}
	hi := min(lo+t.o.BatchSeqs, len(t.order))
	t.batch = t.batch[:0]
	for _, i := range t.order[lo:hi] {
		// Anchors are drawn from the seed, the epoch and the sample, so
		// that a resumed run draws the same ones.
		rng := rand.New(rand.NewPCG(t.o.Seed^0xa1c4, uint64(t.epoch)<<32|uint64(i)))
		sb, err := t.read(i, rng)
		if err != nil {
			return false, err
		}
		if sb != nil {
			t.batch = append(t.batch, sb)
		}
	}
	t.cursor++
	return true, nil
}

// read reads sample i and builds its blocks (nil when it has no anchor).
func (t *trainer) read(i int, rng *rand.Rand) (*seqBatch, error) {
	ds, g := t.in.Data, t.g
	if err := ds.Sample(i, &t.smp, dataset.Features|dataset.Final); err != nil {
		return nil, fmt.Errorf("dspark: reading sample %d: %w", i, err)
	}
	s := &t.smp
	if len(s.Features) != g.Features {
		return nil, fmt.Errorf("dspark: sample %d holds %d feature layers, the draft fuses %d", i, len(s.Features), g.Features)
	}
	T := min(len(s.Tokens), t.o.MaxLength)
	if len(s.LossMask) < T || len(s.Final) < T*g.TargetHidden {
		return nil, fmt.Errorf("dspark: sample %d: %d tokens need as many loss-mask entries (%d) and final-norm rows (%d values of width %d)", i, T, len(s.LossMask), len(s.Final), g.TargetHidden)
	}
	for _, tok := range s.Tokens[:T] {
		if tok < 0 || int(tok) >= g.Vocab {
			return nil, fmt.Errorf("dspark: sample %d holds token %d outside the vocabulary [0, %d)", i, tok, g.Vocab)
		}
	}
	cand := anchorCandidates(nil, s.LossMask[:T])
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
	B, H, F, Hd := g.BlockSize, g.TargetHidden, g.Features, g.Hidden
	S := anchors[len(anchors)-1]
	sb := &seqBatch{feat: make([]float32, S*F*H), pos: make([]int, S)}
	for c := range F {
		f := s.Features[c]
		if len(f) < T*H {
			return nil, fmt.Errorf("dspark: feature layer %d holds %d values for %d tokens of width %d", c, len(f), T, H)
		}
		for j := range S {
			copy(sb.feat[(j*F+c)*H:(j*F+c+1)*H], f[j*H:(j+1)*H])
		}
	}
	for j := range S {
		sb.pos[j] = j
	}
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

// Position is the update after the one read.
func (t *trainer) Position() loop.Position { return loop.Position{Cursor: t.cursor} }

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

// Evaluate runs the held-out samples with anchors drawn from a fixed
// stream (the same at every evaluation).
func (t *trainer) Evaluate(e loop.Eval) (*EvalMetrics, error) {
	B := t.g.BlockSize
	ev := &evalTally{correct: make([]int, B), counted: make([]int, B), alpha: make([]float64, B), confErr: make([]float64, B)}
	var wsum float64
	for _, i := range t.evalIdx {
		rng := rand.New(rand.NewPCG(t.o.Seed^0xe7a1, uint64(i)))
		sb, err := t.read(i, rng)
		if err != nil {
			return nil, err
		}
		if sb == nil || sb.wsum == 0 {
			continue
		}
		st, err := t.pass(sb, sb.wsum, false, ev)
		if err != nil {
			return nil, err
		}
		ev.lossW += st.Loss * sb.wsum
		ev.ce += st.CE * sb.wsum
		ev.l1 += st.L1 * sb.wsum
		ev.bce += st.BCE * sb.wsum
		wsum += sb.wsum
	}
	m := &EvalMetrics{Epoch: e.Epoch + 1, Step: e.Step, ElapsedSec: e.Elapsed.Seconds(), TrainLoss: e.TrainLoss,
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
	acc := make([]float64, len(t.correct))
	for k := range acc {
		if t.counted[k] > 0 {
			acc[k] = float64(t.correct[k]) / float64(t.counted[k])
		}
	}
	return map[string]any{"kind": "train", "epoch": s.Epoch, "step": s.Step, "loss": s.Loss, "lr": s.LR,
		"grad_norm": s.GradNorm, "accuracy": acc, "tokens": s.Tokens, "tokens_per_s": float64(s.Tokens) / s.Took.Seconds()}
}

// draft wraps the current weights as a draft.
func (t *trainer) draft() *ddspark.Draft {
	return &ddspark.Draft{Geometry: t.g, Params: t.w, Heads: t.hw, Embed: t.in.Embed, LMHead: t.in.LMHead,
		LayerIDs: append([]int(nil), t.in.Layers...), TargetLayers: t.in.Config.NumLayers, NumAnchors: t.o.Anchors}
}

// Export writes the draft into job.Out/dspark, drafter.json, then
// SHA256SUMS over them.
func (t *trainer) Export(job *loop.Job, r *loop.Result[*EvalMetrics]) error {
	if err := drafters.RemoveSums(job.Out); err != nil {
		return err
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
	err := atomicfile.WriteJSON(filepath.Join(job.Out, ProvenanceFile), provenance{
		Method: string(ddspark.Kind), Formats: []string{ExportDir}, Format: format,
		Hidden: g.Hidden, Vocab: g.Vocab, FeatureLayers: d.LayerIDs, BlockSize: g.BlockSize, MaskToken: g.MaskToken,
		DraftLayers: g.Layers, MarkovRank: sh.Rank, Confidence: sh.Confidence, ConfWithMarkov: sh.WithMarkov,
		Loss: t.o.Loss, Gamma: t.o.Gamma, Anchors: t.o.Anchors,
		BaseModel: p.BaseModel, TargetFingerprint: p.TargetFingerprint, TargetLayers: p.TargetLayers, DataManifests: manifests,
		Args: p.Args, Steps: r.Steps, Stopped: r.Stopped, Metrics: r.Best,
	})
	if err != nil {
		return err
	}
	return drafters.WriteSums(job.Out, []string{ProvenanceFile, ExportDir + "/" + drafters.ConfigFile, ExportDir + "/model.safetensors"})
}
