package dflash

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
	ddflash "github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/loop"
	"github.com/drafter-ai/drafter/train/optim"
)

// Inputs are what Train (and train/dspark's) trains from besides its
// options.
type Inputs struct {
	// Config is the target's config; Layers the fused HF indices.
	Config *checkpoint.Config
	Layers []int
	// Embed and LMHead are the target's embedding and lm_head, [V, H]
	// float32 each (the same values when tied), frozen (DSpark exports them
	// as the draft's own copies).
	Embed, LMHead []float32
	// Data holds tokens, loss masks and Features (one per Layers entry);
	// for DSpark also Final (the target's final-norm state).
	Data dataset.Dataset
	// Resume continues the run in the job's output folder.
	Resume bool
	// TargetName names the verifier in the speculators layout.
	TargetName string
}

// Files Train writes besides the loop's.
const (
	// ExportDir is the export's subfolder.
	ExportDir = "dflash"
	// ProvenanceFile is drafter.json.
	ProvenanceFile = drafters.ProvenanceFile
)

// EvalMetrics are a held-out evaluation.
type EvalMetrics struct {
	// EvalStamp says when the evaluation ran.
	EvalStamp
	// Loss is the decayed-weight mean cross-entropy (the training loss).
	Loss float64 `json:"loss"`
	// Accuracy[k-1] is slot k's top-1 accuracy over its in-mask labels.
	Accuracy []float64 `json:"accuracy"`
	// AcceptLen is the simulated greedy acceptance length per block: 1 +
	// the mean number of leading slots whose top-1 is the label (labels
	// within the response; a block stops at its first label outside).
	AcceptLen float64 `json:"accept_len"`
	Blocks    int     `json:"blocks"`
}

// Better is a lower held-out loss.
func (m *EvalMetrics) Better(b *EvalMetrics) bool { return m.Loss < b.Loss }

// Record is the metrics.jsonl line.
func (m *EvalMetrics) Record(best bool) any {
	return map[string]any{"kind": "eval", "epoch": m.Epoch, "step": m.Step, "loss": m.Loss, "accuracy": m.Accuracy,
		"accept_len": m.AcceptLen, "blocks": m.Blocks, "train_loss": m.TrainLoss, "elapsed_s": m.ElapsedSec, "best": best}
}

// Summary is the progress line.
func (m *EvalMetrics) Summary() string {
	return fmt.Sprintf("eval step %d: loss %.4f, simulated acceptance %.3f, slot accuracy %s", m.Step, m.Loss, m.AcceptLen, loop.FormatFloats(m.Accuracy))
}

// Result is what Train did.
type Result struct {
	loop.Result[*EvalMetrics]
	Draft     *ddflash.Draft
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

// Train trains a DFlash draft with the shared loop and exports it into
// job.Out/dflash, with drafter.json and SHA256SUMS beside it.
func Train(ctx context.Context, o Options, in Inputs, job *loop.Job) (*Result, error) {
	t, err := newTrainer(o, in)
	if err != nil {
		return nil, err
	}
	lc := LoopConfig(o.Training, string(ddflash.Kind), t.o, in.Resume, o.Progress)
	r, err := loop.Run(ctx, lc, job, t)
	if err != nil {
		return nil, err
	}
	return &Result{Result: *r, Draft: t.draft(), ExportDir: filepath.Join(job.Out, ExportDir)}, nil
}

// trainer is the DFlash side of the loop (loop.Trainer).
type trainer struct {
	o      Options
	in     Inputs
	g      ddflash.Geometry
	gamma  float64
	dev    tensor.Device
	w, gw  *ddflash.Weights[float32]
	net    *ddflash.Net[float32]
	params []optim.Param
	*Schedule

	batch []seqBatch // the batch Next read
	smp   dataset.Sample
	// The step's metrics.
	correct, counted []int
	// scratch
	logits, dY []float32
}

// seqBatch is one sequence's blocks, ready for the passes.
type seqBatch struct {
	feat    []float32 // [S, F*H] context features
	pos     []int     // 0..S-1
	emb     []float32 // [R, Hd] block embeddings
	blocks  []ddflash.Block
	labels  []int     // per row, -1 for none
	weights []float64 // per row
	wsum    float64
}

func newTrainer(o Options, in Inputs) (*trainer, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	c, ds := in.Config, in.Data
	if err := CheckInputs(c, ds, in.Embed, in.LMHead); err != nil {
		return nil, fmt.Errorf("dflash: %w", err)
	}
	t := &trainer{o: o, in: in, gamma: o.gamma(), dev: cpu.New(nil), Schedule: NewSchedule(o.Training, ds.NumSamples())}
	mask := o.MaskToken
	if mask < 0 {
		var err error
		if mask, err = LeastFrequent(ds, t.TrainIdx, c.VocabSize); err != nil {
			return nil, fmt.Errorf("dflash: %w", err)
		}
	}
	t.o.MaskToken = mask
	t.o.Gamma = t.gamma
	t.g = ddflash.TargetGeometry(c, o.DraftLayers, len(in.Layers), o.BlockSize, mask)
	t.g.Causal = o.Causal
	if o.Intermediate > 0 {
		t.g.Intermediate = o.Intermediate
	}
	if err := t.g.Validate(); err != nil {
		return nil, err
	}
	var err error
	if t.w, err = ddflash.NewWeights[float32](t.g, nil); err != nil {
		return nil, err
	}
	if t.gw, err = ddflash.NewWeights[float32](t.g, nil); err != nil {
		return nil, err
	}
	InitBackbone(t.w, t.g, rand.New(rand.NewPCG(o.Seed, 0xdf1a5)))
	t.net = ddflash.NewNet(t.g, t.w, t.gw)
	if t.params, err = BackboneParams(t.dev, t.g, t.w, t.gw); err != nil {
		return nil, fmt.Errorf("dflash: %w", err)
	}
	return t, nil
}

// Device is the CPU device the weights live on (the passes run on the
// host).
func (t *trainer) Device() tensor.Device { return t.dev }

// Params are the weights and gradients.
func (t *trainer) Params() []optim.Param { return t.params }

// Next reads the next update's sequences and samples their anchors.
func (t *trainer) Next() (bool, error) {
	t.batch = t.batch[:0]
	return t.NextBatch(func(i int, rng *rand.Rand) error {
		sb, err := t.read(i, rng)
		if sb != nil {
			t.batch = append(t.batch, *sb)
		}
		return err
	})
}

// read reads sample i and builds its blocks (nil when it has no anchor).
func (t *trainer) read(i int, rng *rand.Rand) (*seqBatch, error) {
	g := t.g
	T, err := ReadSample(t.in.Data, i, &t.smp, dataset.Features, g.Features, g.Vocab, t.o.MaxLength)
	if err != nil {
		return nil, fmt.Errorf("dflash: %w", err)
	}
	s := &t.smp
	anchors := SampleAnchors(s.LossMask[:T], t.o.Anchors, rng)
	if len(anchors) == 0 {
		return nil, nil
	}
	return buildBlocks(g, t.gamma, s, T, anchors, t.in.Embed)
}

// SampleAnchors draws up to n anchor positions uniformly without
// replacement among the positions p >= 1 where mask[p] and mask[p+1] are set
// (the anchor is a response token and so is the first token it drafts),
// sorted. Position 0 is left out: it has no context before it.
func SampleAnchors(mask []bool, n int, rng *rand.Rand) []int {
	cand := AnchorCandidates(nil, mask, 1)
	if len(cand) > n {
		rng.Shuffle(len(cand), func(a, b int) { cand[a], cand[b] = cand[b], cand[a] })
		cand = cand[:n]
		sort.Ints(cand)
	}
	return cand
}

// buildBlocks lays out one sequence's blocks for anchors (sorted): the
// context rows 0..maxAnchor-1 (the last anchor sees those), each block's
// embeddings [token at p, mask, ...], labels (slot k: the token at p+k) and
// weights exp(-(k-1)/gamma) x loss mask x in-bounds, 0 for slot 0.
func buildBlocks(g ddflash.Geometry, gamma float64, s *dataset.Sample, T int, anchors []int, embed []float32) (*seqBatch, error) {
	B, H := g.BlockSize, g.TargetHidden
	feat, pos, err := ContextRows(s.Features[:g.Features], T, anchors[len(anchors)-1], H)
	if err != nil {
		return nil, fmt.Errorf("dflash: %w", err)
	}
	sb := &seqBatch{feat: feat, pos: pos}
	R := len(anchors) * B
	sb.emb = make([]float32, R*g.Hidden)
	sb.labels = make([]int, R)
	sb.weights = make([]float64, R)
	maskRow := embed[g.MaskToken*H : (g.MaskToken+1)*H]
	for b, p := range anchors {
		sb.blocks = append(sb.blocks, ddflash.Block{Row0: b * B, Start: p, Ctx: p})
		for k := range B {
			r := b*B + k
			sb.labels[r] = -1
			if k == 0 {
				tok := int(s.Tokens[p])
				copy(sb.emb[r*H:(r+1)*H], embed[tok*H:(tok+1)*H])
				continue
			}
			copy(sb.emb[r*H:(r+1)*H], maskRow)
			if p+k < T && s.LossMask[p+k] {
				sb.labels[r] = int(s.Tokens[p+k])
				sb.weights[r] = math.Exp(-float64(k-1) / gamma)
				sb.wsum += sb.weights[r]
			}
		}
	}
	return sb, nil
}

// Step runs the passes over the batch: the loss is Σ w·CE / Σ w over all
// its sequences' blocks.
func (t *trainer) Step() (float64, int) {
	var wsum float64
	for i := range t.batch {
		wsum += t.batch[i].wsum
	}
	t.correct, t.counted = make([]int, t.g.BlockSize-1), make([]int, t.g.BlockSize-1)
	if wsum == 0 {
		return 0, 0
	}
	var loss float64
	tokens := 0
	for i := range t.batch {
		l, err := t.pass(&t.batch[i], wsum, true, nil)
		if err != nil {
			return math.NaN(), 0
		}
		loss += l
		tokens += len(t.batch[i].pos)
	}
	return loss, tokens
}

// pass runs one sequence forward (and backward when grad), returning its
// share of the loss Σ w·CE / wsum; acc, when set, counts the leading
// correct slots per block.
func (t *trainer) pass(sb *seqBatch, wsum float64, grad bool, acc *accepts) (float64, error) {
	g, n := t.g, t.net
	if err := n.Context(sb.feat, sb.pos); err != nil {
		return 0, err
	}
	if err := n.Blocks(sb.emb, sb.blocks, n.Kc, n.Vc); err != nil {
		return 0, err
	}
	R, V, H := len(sb.labels), g.Vocab, g.Hidden
	t.logits = growF(t.logits, R*V)
	if !grad {
		// Without a gradient the logits stay logits, for the acceptance.
		loss := n.Loss(t.in.LMHead, sb.labels, sb.weights, wsum, t.logits, nil, t.correct, t.counted)
		if acc != nil {
			acc.add(t.logits, sb.labels, V, g.BlockSize)
		}
		return loss, nil
	}
	t.dY = growF(t.dY, R*H)
	clear(t.dY)
	loss := n.Loss(t.in.LMHead, sb.labels, sb.weights, wsum, t.logits, t.dY, t.correct, t.counted)
	n.Backward(t.dY)
	return loss, nil
}

func growF(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// accepts counts simulated greedy acceptance: per block the leading slots
// whose argmax is the label.
type accepts struct {
	blocks, accepted int
}

func (a *accepts) add(logits []float32, labels []int, V, B int) {
	for b := 0; b*B < len(labels); b++ {
		a.blocks++
		for k := 1; k < B; k++ {
			r := b*B + k
			if labels[r] < 0 {
				break
			}
			lg := logits[r*V : (r+1)*V]
			arg := 0
			for v, x := range lg {
				if x > lg[arg] {
					arg = v
				}
			}
			if arg != labels[r] {
				break
			}
			a.accepted++
		}
	}
}

// Evaluate runs the held-out samples with anchors drawn from a fixed
// stream (the same at every evaluation).
func (t *trainer) Evaluate(e loop.Eval) (*EvalMetrics, error) {
	var acc accepts
	var lossW, wsum float64
	B := t.g.BlockSize
	correct, counted := make([]int, B-1), make([]int, B-1)
	for _, i := range t.EvalIdx {
		sb, err := t.read(i, t.EvalRand(i))
		if err != nil {
			return nil, err
		}
		if sb == nil || sb.wsum == 0 {
			continue
		}
		t.correct, t.counted = make([]int, B-1), make([]int, B-1)
		l, err := t.pass(sb, sb.wsum, false, &acc)
		if err != nil {
			return nil, err
		}
		lossW += l * sb.wsum
		wsum += sb.wsum
		for k := range correct {
			correct[k] += t.correct[k]
			counted[k] += t.counted[k]
		}
	}
	m := &EvalMetrics{EvalStamp: NewEvalStamp(e),
		Accuracy: make([]float64, B-1), Blocks: acc.blocks, AcceptLen: 1}
	if wsum > 0 {
		m.Loss = lossW / wsum
	}
	for k := range correct {
		if counted[k] > 0 {
			m.Accuracy[k] = float64(correct[k]) / float64(counted[k])
		}
	}
	if acc.blocks > 0 {
		m.AcceptLen += float64(acc.accepted) / float64(acc.blocks)
	}
	return m, nil
}

// TrainLine is a step's metrics.jsonl line with its slot accuracies.
func (t *trainer) TrainLine(s loop.StepStats) any {
	return TrainLine(s, t.correct, t.counted)
}

// draft wraps the current weights as a draft.
func (t *trainer) draft() *ddflash.Draft {
	return &ddflash.Draft{Geometry: t.g, Params: t.w, LayerIDs: append([]int(nil), t.in.Layers...), TargetLayers: t.in.Config.NumLayers}
}

// Export writes the draft into job.Out/dflash, drafter.json, then
// SHA256SUMS over them.
func (t *trainer) Export(job *loop.Job, r *loop.Result[*EvalMetrics]) error {
	if err := drafters.RemoveSums(job.Out); err != nil {
		return err
	}
	d := t.draft()
	format := t.o.Format
	if format == "" {
		format = ddflash.FormatNative
	}
	opt := ddflash.ExportOptions{Format: format, TargetName: t.in.TargetName, TargetArchitectures: t.in.Config.Architectures}
	if err := ddflash.Export(filepath.Join(job.Out, ExportDir), d, opt); err != nil {
		return err
	}
	p := job.Provenance
	manifests := p.DataManifests
	if manifests == nil {
		manifests = map[string]string{}
	}
	g := t.g
	err := atomicfile.WriteJSON(filepath.Join(job.Out, ProvenanceFile), provenance{
		Method: string(ddflash.Kind), Formats: []string{ExportDir}, Format: format,
		Hidden: g.Hidden, Vocab: g.Vocab, FeatureLayers: d.LayerIDs, BlockSize: g.BlockSize, MaskToken: g.MaskToken,
		DraftLayers: g.Layers, Causal: g.Causal, Gamma: t.gamma, Anchors: t.o.Anchors,
		BaseModel: p.BaseModel, TargetFingerprint: p.TargetFingerprint, TargetLayers: p.TargetLayers, DataManifests: manifests,
		Args: p.Args, Steps: r.Steps, Stopped: r.Stopped, Metrics: r.Best,
	})
	if err != nil {
		return err
	}
	files := []string{ProvenanceFile}
	for _, f := range ddflash.ExportFiles() {
		files = append(files, ExportDir+"/"+f)
	}
	return drafters.WriteSums(job.Out, files)
}
