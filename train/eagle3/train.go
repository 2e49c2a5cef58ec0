// Package eagle3 trains an EAGLE-3 draft layer (pkg/drafters/eagle3) on
// captured target hidden states: it packs samples into batches, computes the
// target distributions and the soft cross-entropy of the draft unrolled for
// several steps ("training-time test", TTT, in ttt.go) with gradients
// flowing through the unroll, and its held-out loss, and trains with the
// shared loop (train/loop), which owns the schedule, checkpoints, resume,
// evaluation cadence and early stopping. The master weights, gradients,
// moments and activations are allocated once on the run's device, so a
// training step allocates nothing and the state leaves the device only for
// checkpoints and exports. The layer, its export layouts and its proposer
// live in pkg/drafters/eagle3.
package eagle3

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/drafters"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/lkloss"
	"github.com/drafter-ai/drafter/train/loop"
	"github.com/drafter-ai/drafter/train/optim"
)

// Config holds a training run's settings. DefaultConfig gives values that
// train well without tuning; a zero field is NOT replaced by its default (0
// turns warm-up, clipping, early stopping and logging off).
type Config struct {
	// DraftVocab is N, capped at the target vocabulary V.
	DraftVocab int `json:"draft_vocab"`
	// Intermediate is the draft layer's MLP width, its config's
	// intermediate_size; 0 takes the target's. The engines read it from the
	// draft's own config, so any width loads.
	Intermediate int `json:"intermediate_size,omitempty"`
	// TargetTemperature τ is the temperature of the target distribution the
	// draft is trained toward, softmax(target logits / τ) over the draft
	// vocabulary; 0 means 1, the recipe's plain softmax (and what runs
	// recorded before the setting existed). A draft served greedily only has
	// to rank the target's top token first, and a sharper target
	// (GreedyTargetTemperature) teaches that better than the plain softmax
	// (docs/performance.md); a sampled draft must match the plain softmax,
	// which the serving rule then warps as it warps the target's.
	TargetTemperature float64 `json:"target_temperature,omitempty"`
	// FCNorm, NormBeforeFC and NormOutput are the EAGLE-3.1 switches on the
	// draft layer (deagle3.Norms, the export's fc_norm, norm_before_fc and
	// norm_output); all false trains plain EAGLE-3. FCNorm and NormBeforeFC
	// exclude each other.
	FCNorm       bool `json:"fc_norm,omitempty"`
	NormBeforeFC bool `json:"norm_before_fc,omitempty"`
	NormOutput   bool `json:"norm_output,omitempty"`
	// Steps is the TTT unroll length; StepDecay the per-step loss weight base
	// (step k weighs StepDecay^k).
	Steps     int     `json:"ttt_steps"`
	StepDecay float64 `json:"step_decay"`
	// Loss is the loss each step trains (lkloss.Parse's spelling): "" or
	// lkloss.CE, the soft cross-entropy toward the target distribution (the
	// default, and what runs recorded before the setting existed), or an LK
	// loss, whose α is over the draft vocabulary's target distribution as
	// the soft cross-entropy's (renormalised over the draft vocabulary).
	// LKEta is lk_hybrid's η (0: lkloss.DefaultEta), set only with a loss
	// that weighs lk_hybrid. A run records both canonically (settings).
	Loss  string  `json:"loss,omitempty"`
	LKEta float64 `json:"lk_eta,omitempty"`
	// LR is the peak learning rate; WarmupFrac the linear warm-up share of the
	// scheduled updates (0: none); MinLRRatio the floor of the cosine decay as
	// a fraction of LR; ClipNorm the global gradient-norm clip (<= 0
	// disables); WeightDecay AdamW's decoupled decay; Beta2 AdamW's
	// second-moment rate.
	LR          float64 `json:"lr"`
	WarmupFrac  float64 `json:"warmup_frac"`
	MinLRRatio  float64 `json:"min_lr_ratio"`
	ClipNorm    float64 `json:"clip_norm"`
	WeightDecay float64 `json:"weight_decay"`
	Beta2       float64 `json:"beta2"`
	// BatchTokens is the batch size in tokens: each update packs whole
	// samples (in the epoch's seeded order) while their truncated lengths
	// fit, and a sample longer than BatchTokens is a batch of its own, so
	// the batch size does not bound the sample length. MaxLength truncates
	// each sample. The buffers hold max(BatchTokens, MaxLength) tokens.
	BatchTokens int `json:"batch_tokens"`
	MaxLength   int `json:"max_length"`
	// Epochs caps the run (the cosine schedule spans it; 0: AutoEpochs of
	// the training tokens); MaxSteps stops it
	// after that many updates in total (0: no limit; it only cuts the run
	// short, the schedule is unchanged); Patience stops it after that many
	// evaluations without a lower held-out loss (0: never stop early).
	Epochs   int `json:"epochs"`
	MaxSteps int `json:"max_steps"`
	Patience int `json:"patience"`
	// EvalEvery is the number of updates between held-out evaluations (0:
	// at the end of every epoch). EvalFraction of the samples (at least one)
	// is held out, chosen by Seed.
	EvalEvery    int     `json:"eval_every"`
	EvalFraction float64 `json:"eval_fraction"`
	// Seed drives initialisation, the held-out split and the sample order.
	Seed uint64 `json:"seed"`
	// CheckpointEvery saves the training state every that many updates, in
	// addition to every evaluation. Resume continues from
	// out/checkpoint.safetensors when it exists.
	CheckpointEvery int  `json:"checkpoint_every"`
	Resume          bool `json:"resume"`
	// LogEvery writes a training line to metrics.jsonl every that many
	// updates (0: none).
	LogEvery int `json:"log_every"`
	// Export says how to write the result (layout, layer ids).
	Export deagle3.ExportOptions `json:"-"`
	// Progress, when set, is called after every update and evaluation.
	Progress func(Progress) `json:"-"`
}

// GreedyTargetTemperature is the target temperature for data distilled
// greedily, for greedy serving: on stories260k's greedy captures it beat 1
// and matched 0.25 (docs/performance.md).
const GreedyTargetTemperature = 0.5

// norms returns the draft layer's EAGLE-3.1 switches.
func (c *Config) norms() deagle3.Norms {
	return deagle3.Norms{FCNorm: c.FCNorm, NormBeforeFC: c.NormBeforeFC, NormOutput: c.NormOutput}
}

// targetTemp returns τ, with 0 read as 1.
func (c *Config) targetTemp() float64 {
	if c.TargetTemperature == 0 {
		return 1
	}
	return c.TargetTemperature
}

// DefaultConfig returns the defaults. Small batches train best: SpecForge
// takes one sample per update, and so do these defaults whenever samples are
// 65 tokens or longer (BatchTokens 128; shorter samples are packed up to 128
// tokens, and a long chat sample of up to MaxLength 2048 tokens is one
// update). On 400 self-distilled stories260k samples (about 106 tokens each)
// this trainer reached held-out step-0 accuracy 0.818 with 2048-token batches
// (about 16 samples, 22 updates per epoch) at its best lr 5e-3, and 0.85-0.86
// with one sample per update at lr 3e-3 (360 updates per epoch); a PyTorch
// re-implementation reached 0.881 at 1e-3 and 0.891 at 3e-3, and 0.756 at
// SpecForge's 1e-4, which is far too low for small runs. Hence lr 3e-3 with
// 1.5% warm-up, a cosine to zero over an epoch cap chosen from the data
// (AutoEpochs: 40 on those 400 samples), clip 0.5, 7 TTT
// steps weighted 0.8^k, 10% held out and evaluated every epoch, and early
// stopping after 4 evaluations without a lower held-out loss, keeping the
// best weights.
func DefaultConfig() Config {
	return Config{
		DraftVocab: deagle3.DefaultDraftVocab, Steps: 7, StepDecay: 0.8,
		LR: 3e-3, WarmupFrac: 0.015, ClipNorm: 0.5, Beta2: 0.999,
		BatchTokens: 128, MaxLength: 2048, Epochs: 0, Patience: 4,
		FCNorm: true, NormOutput: true,
		EvalFraction: 0.1, LogEvery: 10,
	}
}

// AutoTokens is the number of training tokens AutoEpochs aims to show the
// draft: 10 epochs of the 7560 training samples (890k tokens) distilled
// from data/prompts/stories-train-8k.jsonl. On them 6 epochs accept 4.23 /
// 6.08 (chain 4 / chain 7) and 10 epochs 4.30 / 6.16, the held-out
// acceptance still rising at the end of both (docs/acceptance.md).
const AutoTokens = 8_500_000

// AutoEpochs is the epoch cap used when Config.Epochs is 0: enough epochs
// to see AutoTokens training tokens, within [2, 40]: 40 on a few hundred
// short samples, 2 from 4.25M tokens up.
func AutoEpochs(tokens int) int {
	if tokens <= 0 {
		return 40
	}
	return min(40, max(2, (AutoTokens+tokens-1)/tokens))
}

func (c *Config) validate() error {
	switch {
	case c.DraftVocab < 1:
		return fmt.Errorf("eagle3: draft vocabulary must be >= 1, got %d", c.DraftVocab)
	case c.Intermediate < 0:
		return fmt.Errorf("eagle3: draft MLP width must be >= 1 (or 0 for the target's), got %d", c.Intermediate)
	case !(c.TargetTemperature >= 0 && c.TargetTemperature <= 100):
		return fmt.Errorf("eagle3: target temperature must lie in (0, 100] (or 0 for 1), got %g", c.TargetTemperature)
	case c.FCNorm && c.NormBeforeFC:
		return errors.New("eagle3: fc_norm and norm_before_fc are mutually exclusive: one norm per feature layer before fc, or one over their concatenation")
	case c.Steps < 1:
		return fmt.Errorf("eagle3: TTT steps must be >= 1, got %d", c.Steps)
	case !(c.StepDecay > 0 && c.StepDecay <= 1):
		return fmt.Errorf("eagle3: step decay must lie in (0,1], got %g", c.StepDecay)
	case !(c.LR > 0):
		return fmt.Errorf("eagle3: lr must be > 0, got %g", c.LR)
	case !(c.WarmupFrac >= 0 && c.WarmupFrac < 1):
		return fmt.Errorf("eagle3: warm-up fraction must lie in [0,1), got %g", c.WarmupFrac)
	case !(c.MinLRRatio >= 0 && c.MinLRRatio <= 1):
		return fmt.Errorf("eagle3: min-lr ratio must lie in [0,1], got %g", c.MinLRRatio)
	case !(c.Beta2 > 0 && c.Beta2 < 1):
		return fmt.Errorf("eagle3: beta2 must lie in (0,1), got %g", c.Beta2)
	case c.WeightDecay < 0:
		return fmt.Errorf("eagle3: weight decay must not be negative, got %g", c.WeightDecay)
	case c.BatchTokens < 3 || c.MaxLength < 3:
		return fmt.Errorf("eagle3: batch tokens and max length must be >= 3 (a sample needs 3 tokens to train a step), got %d and %d", c.BatchTokens, c.MaxLength)
	case c.Epochs < 0:
		return fmt.Errorf("eagle3: epochs must be >= 1 (or 0: chosen from the data), got %d", c.Epochs)
	case !(c.EvalFraction > 0 && c.EvalFraction < 1):
		return fmt.Errorf("eagle3: held-out fraction must lie in (0,1) (the best weights are chosen by held-out loss), got %g", c.EvalFraction)
	case c.MaxSteps < 0 || c.Patience < 0 || c.EvalEvery < 0 || c.CheckpointEvery < 0 || c.LogEvery < 0:
		return errors.New("eagle3: max steps, patience and the eval/checkpoint/log intervals must not be negative")
	}
	if _, err := lkloss.Parse(c.Loss, c.LKEta); err != nil {
		return fmt.Errorf("eagle3: %w", err)
	}
	if !c.Export.DefaultLayers { // refused before training rather than at the export
		if err := deagle3.CheckLayerIDs(c.Export.LayerIDs, 0); err != nil {
			return fmt.Errorf("eagle3: feature layers %v: %w", c.Export.LayerIDs, err)
		}
	}
	return nil
}

// loss returns the parsed Loss (validate has checked it).
func (c *Config) loss() lkloss.Loss {
	l, _ := lkloss.Parse(c.Loss, c.LKEta)
	return l
}

// settings returns c as the run records it: the loss in its canonical
// spelling and η as used (DefaultEta for 0), only with a loss that weighs
// lk_hybrid, so that every spelling of the same training records the
// same settings.
func (c Config) settings() Config {
	c.Loss, c.LKEta = lkloss.Recorded(c.Loss, c.LKEta)
	return c
}

// Progress reports where a run is (Eval is set after an evaluation).
type Progress = loop.Progress[*EvalMetrics]

// EvalMetrics are held-out results: the loss (as trained: sum over steps of
// 0.8^k times the step's mean soft cross-entropy or LK loss), the per-step
// accuracy acc_k (draft argmax == target argmax among rows whose predicted
// token is a response token; a target argmax outside the draft vocabulary
// is a miss) and the chain acceptance length they imply, 1 + sum_k
// prod_{j<=k} acc_j; with an LK loss also the per-step mean α = Σ min(p, q)
// over the rows the loss weighs (the probability that step k's sampled
// draft token is accepted against the target distribution renormalised
// over the draft vocabulary, the p both losses train toward).
type EvalMetrics struct {
	Loss       float64   `json:"loss"`
	StepLoss   []float64 `json:"step_loss"`
	Accuracy   []float64 `json:"accuracy"`
	Alpha      []float64 `json:"alpha,omitempty"`
	AcceptLen  float64   `json:"accept_length"`
	Tokens     int       `json:"tokens"`
	Epoch      int       `json:"epoch"`
	Step       int       `json:"step"`
	BestSoFar  bool      `json:"best"`
	TrainLoss  float64   `json:"train_loss"`
	ElapsedSec float64   `json:"elapsed_s"`
}

// Better reports whether evaluation m has a lower held-out loss than b.
func (m *EvalMetrics) Better(b *EvalMetrics) bool { return m.Loss < b.Loss }

// Record notes whether the evaluation is the best so far (BestSoFar) and
// returns its metrics.jsonl line.
func (m *EvalMetrics) Record(best bool) any {
	m.BestSoFar = best
	line := map[string]any{"kind": "eval", "epoch": m.Epoch, "step": m.Step, "loss": m.Loss, "step_loss": m.StepLoss,
		"accuracy": m.Accuracy, "accept_length": m.AcceptLen, "train_loss": m.TrainLoss, "best": m.BestSoFar, "elapsed_s": m.ElapsedSec}
	if m.Alpha != nil {
		line["alpha"] = m.Alpha
	}
	return line
}

// Summary describes the evaluation for the progress report.
func (m *EvalMetrics) Summary() string {
	return fmt.Sprintf("eval epoch %d step %d: loss %.4f  acc %s  acceptance %.3f", m.Epoch, m.Step, m.Loss, loop.FormatFloats(m.Accuracy), m.AcceptLen)
}

// Result summarises a finished run: the loop's result (Best is the
// evaluation of the exported weights), the draft vocabulary and geometry,
// and the export folder.
type Result struct {
	loop.Result[*EvalMetrics]
	Vocab     *deagle3.Vocab
	Geometry  deagle3.Geometry
	ExportDir string
}

// Files Train writes into its output folder besides the loop's.
const (
	// ExportDir is the export's subfolder.
	ExportDir = "eagle3"
	// ProvenanceFile is drafter.json, at the top of the output folder as
	// Medusa's.
	ProvenanceFile = drafters.ProvenanceFile
)

// provenance is drafter.json.
type provenance struct {
	Method string `json:"method"`
	// Variant is deagle3.VariantEAGLE3 or deagle3.VariantEAGLE31 (any of
	// the norm switches on), and the switches follow: what the export's
	// config says, for engines that predate EAGLE-3.1 and would ignore them.
	Variant           string            `json:"variant"`
	FCNorm            bool              `json:"fc_norm"`
	NormBeforeFC      bool              `json:"norm_before_fc"`
	NormOutput        bool              `json:"norm_output"`
	Formats           []string          `json:"formats"`
	Format            string            `json:"format"`
	Hidden            int               `json:"hidden_size"`
	Vocab             int               `json:"vocab_size"`
	DraftVocab        int               `json:"draft_vocab_size"`
	DraftVocabSeen    int               `json:"draft_vocab_seen"`
	TTTSteps          int               `json:"ttt_steps"`
	Loss              string            `json:"loss"`
	LKEta             float64           `json:"lk_eta,omitempty"`
	FeatureLayers     []int             `json:"feature_layers,omitempty"`
	DefaultLayers     bool              `json:"default_feature_layers"`
	BaseModel         string            `json:"base_model_name_or_path,omitempty"`
	TargetFingerprint string            `json:"target_fingerprint"`
	TargetLayers      int               `json:"target_num_hidden_layers,omitempty"`
	DataManifests     map[string]string `json:"data_manifests"`
	Args              any               `json:"args"`
	Steps             int               `json:"steps"`
	Stopped           string            `json:"stopped"`
	Metrics           *EvalMetrics      `json:"metrics,omitempty"`
}

// Train trains an EAGLE-3 draft layer for a target of geometry target (its
// draft vocabulary is cfg's), input embedding embed [V, H] and lm_head
// lmHead [V, H] (embed again when tied), on ds (tokens, loss masks, the three
// feature layers and the final post-norm state), with the shared loop
// (train/loop). It writes into job.Out: eagle3/ (the exported draft:
// config.json, model.safetensors), drafter.json (job.Provenance and the
// final held-out metrics), and the loop's metrics.jsonl, checkpoint and
// train_args.json. Cancelling ctx saves a checkpoint and returns an error
// wrapping ctx's; a later run with Resume continues and ends bit-identical
// to an uninterrupted run, metrics.jsonl included (timings aside).
func Train(ctx context.Context, cfg Config, target deagle3.Geometry, embed, lmHead []float32, ds dataset.Dataset, dev tensor.Device, job *loop.Job) (*Result, error) {
	t, err := newTrainer(cfg, target, embed, lmHead, ds, dev)
	if err != nil {
		return nil, err
	}
	// Runs recorded before --intermediate, --target-temperature, the
	// EAGLE-3.1 switches and --loss existed trained at the target's width
	// toward the plain softmax, as plain EAGLE-3, with the soft
	// cross-entropy.
	unrecorded := map[string]any{"intermediate_size": target.Intermediate, "target_temperature": 1,
		"fc_norm": false, "norm_before_fc": false, "norm_output": false, "loss": lkloss.CE}
	lc := loop.Config[*EvalMetrics]{Method: string(deagle3.Kind), Settings: cfg.settings(), Unrecorded: unrecorded,
		LR: cfg.LR, MinLRRatio: cfg.MinLRRatio, ClipNorm: cfg.ClipNorm, MaxSteps: cfg.MaxSteps, Patience: cfg.Patience,
		EvalEvery: cfg.EvalEvery, CheckpointEvery: cfg.CheckpointEvery, LogEvery: cfg.LogEvery, Resume: cfg.Resume, Progress: cfg.Progress}
	r, err := loop.Run(ctx, lc, job, t)
	if err != nil {
		return nil, err
	}
	return &Result{Result: *r, Vocab: t.voc, Geometry: t.g, ExportDir: filepath.Join(job.Out, ExportDir)}, nil
}

// trainer is the EAGLE-3 side of the loop (loop.Trainer).
type trainer struct {
	cfg     Config
	g       deagle3.Geometry
	ds      dataset.Dataset
	p       *deagle3.Params
	n       *net
	voc     *deagle3.Vocab
	params  []optim.Param
	smp     dataset.Sample
	lengths []int
	// trainIdx and evalIdx are the training and held-out samples;
	// epochSteps the batches of each epoch; evalBatches the held-out ones.
	trainIdx, evalIdx []int
	epochSteps        []int
	evalBatches       [][]int
	// The current epoch's batches and the next one's index.
	batches [][]int
	cursor  int
	flops   float64 // per token of a step
}

// newTrainer splits the samples (a seeded held-out share), builds the draft
// vocabulary from the training samples' response tokens, initialises the
// layer and packs every epoch's batches to plan the schedule: all from
// tokens and masks, reading no state.
func newTrainer(cfg Config, target deagle3.Geometry, embed, lmHead []float32, ds dataset.Dataset, dev tensor.Device) (*trainer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := target
	g.DraftVocab = min(cfg.DraftVocab, g.Vocab)
	g.Norms = cfg.norms()
	if cfg.Intermediate > 0 {
		g.Intermediate = cfg.Intermediate
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if len(embed) != g.Vocab*g.Hidden || len(lmHead) != g.Vocab*g.Hidden {
		return nil, fmt.Errorf("eagle3: target embedding has %d values and lm_head %d, want vocab %d x hidden %d each", len(embed), len(lmHead), g.Vocab, g.Hidden)
	}
	if ds.Hidden() != g.Hidden {
		return nil, fmt.Errorf("eagle3: the dataset's hidden states have width %d, the target's hidden_size is %d", ds.Hidden(), g.Hidden)
	}
	if ds.NumSamples() < 2 {
		return nil, fmt.Errorf("eagle3: need at least 2 samples (one held out), got %d", ds.NumSamples())
	}
	t := &trainer{cfg: cfg, g: g, ds: ds}

	// Split, lengths and the draft vocabulary, from tokens and masks only.
	perm := rand.New(rand.NewPCG(cfg.Seed, 1)).Perm(ds.NumSamples())
	nEval := max(1, int(math.Round(cfg.EvalFraction*float64(ds.NumSamples()))))
	nEval = min(nEval, ds.NumSamples()-1)
	t.evalIdx, t.trainIdx = append([]int(nil), perm[:nEval]...), append([]int(nil), perm[nEval:]...)
	sort.Ints(t.evalIdx)
	sort.Ints(t.trainIdx)
	t.lengths = make([]int, ds.NumSamples())
	counts := make([]int64, g.Vocab)
	for _, i := range perm {
		if err := readTokens(ds, i, &t.smp, g.Vocab); err != nil {
			return nil, fmt.Errorf("eagle3: %w", err)
		}
		t.lengths[i] = len(t.smp.Tokens)
	}
	for _, i := range t.trainIdx {
		if err := readTokens(ds, i, &t.smp, g.Vocab); err != nil {
			return nil, fmt.Errorf("eagle3: %w", err)
		}
		countInto(counts, &t.smp)
	}
	var err error
	if t.voc, err = deagle3.BuildVocab(counts, g.DraftVocab); err != nil {
		return nil, err
	}

	t.p = deagle3.NewParams(g)
	initParams(t.p, g, cfg.Seed, lmHead, t.voc)
	if t.n, err = newNet(g, cfg.Steps, cfg.StepDecay, dev, t.p, embed, lmHead, t.voc, max(cfg.BatchTokens, cfg.MaxLength), cfg.MaxLength, true); err != nil {
		return nil, err
	}
	t.n.invTau = 1 / cfg.targetTemp()
	if l := cfg.loss(); !l.CE {
		t.n.lk, t.n.useLK = l.LK, true
	}
	grads := t.n.grW.Named(g)
	for i, w := range t.n.layer.Weights().Named(g) {
		t.params = append(t.params, optim.Param{Name: w.Name, Data: w.Tensor, Grad: grads[i].Tensor})
	}
	epochs := cfg.Epochs
	if epochs == 0 {
		tokens := 0
		for _, i := range t.trainIdx {
			tokens += min(t.lengths[i], cfg.MaxLength)
		}
		epochs = AutoEpochs(tokens)
	}
	total := 0
	for e := 0; e < epochs; e++ {
		t.epochSteps = append(t.epochSteps, len(t.epochBatches(e)))
		total += t.epochSteps[e]
	}
	if total == 0 {
		return nil, errors.New("eagle3: no training sample has 3 or more tokens")
	}
	t.evalBatches = pack(t.evalIdx, t.lengths, cfg.MaxLength, max(cfg.BatchTokens, cfg.MaxLength))
	t.flops = FLOPsPerToken(g, cfg.Steps)
	return t, nil
}

// epochBatches packs epoch's seeded order of the training samples greedily
// by tokens.
func (t *trainer) epochBatches(epoch int) [][]int {
	order := append([]int(nil), t.trainIdx...)
	rand.New(rand.NewPCG(t.cfg.Seed, uint64(epoch)+2)).Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	return pack(order, t.lengths, t.cfg.MaxLength, t.cfg.BatchTokens)
}

// Device is the device the layer trains on.
func (t *trainer) Device() tensor.Device { return t.n.dev }

// Params lists the layer's master weights and gradients on the device under
// their native names.
func (t *trainer) Params() []optim.Param { return t.params }

// Plan: the packed batches of each epoch, a warm-up of WarmupFrac of them
// all, always held-out samples.
func (t *trainer) Plan() loop.Plan {
	total := 0
	for _, n := range t.epochSteps {
		total += n
	}
	return loop.Plan{EpochSteps: t.epochSteps, Warmup: int(math.Ceil(t.cfg.WarmupFrac * float64(total))), HeldOut: true,
		AdamW: optim.AdamWConfig{Beta1: 0.9, Beta2: t.cfg.Beta2, Eps: 1e-8, WeightDecay: t.cfg.WeightDecay}}
}

// Seek packs epoch's batches and starts at batch pos.Cursor.
func (t *trainer) Seek(epoch int, pos loop.Position) error {
	t.batches, t.cursor = t.epochBatches(epoch), pos.Cursor
	return nil
}

// Next reads the next batch's samples into the net.
func (t *trainer) Next() (bool, error) {
	if t.cursor >= len(t.batches) {
		return false, nil
	}
	if err := fillBatch(t.n, t.ds, t.batches[t.cursor], &t.smp); err != nil {
		return false, err
	}
	t.cursor++
	return true, nil
}

// Position is the batch after the one read.
func (t *trainer) Position() loop.Position { return loop.Position{Cursor: t.cursor} }

// Step runs the unrolled draft forward and, when its loss is finite,
// backward.
func (t *trainer) Step() (float64, int) {
	loss := t.n.forward(true)
	if !math.IsNaN(loss) && !math.IsInf(loss, 0) {
		t.n.backward()
	}
	return loss, t.n.rows
}

// Evaluate runs the held-out batches (EvalMetrics).
func (t *trainer) Evaluate(e loop.Eval) (*EvalMetrics, error) {
	em, err := evaluate(t.n, t.ds, t.evalBatches)
	if err != nil {
		return nil, err
	}
	em.Epoch, em.Step, em.ElapsedSec, em.TrainLoss = e.Epoch+1, e.Step, e.Elapsed.Seconds(), e.TrainLoss
	return &em, nil
}

// TrainLine is a step's metrics.jsonl line, with the step's accuracies and
// its throughput.
func (t *trainer) TrainLine(s loop.StepStats) any {
	acc := make([]float64, t.cfg.Steps)
	for k := range acc {
		acc[k] = ratio(t.n.correctK[k], t.n.maskedK[k])
	}
	tps := float64(s.Tokens) / s.Took.Seconds()
	line := map[string]any{"kind": "train", "epoch": s.Epoch, "step": s.Step, "loss": s.Loss, "lr": s.LR,
		"grad_norm": s.GradNorm, "accuracy": acc, "tokens": s.Tokens, "tokens_per_s": tps, "gflops": t.flops * tps / 1e9}
	if t.n.useLK {
		// The step's mean α per unrolled step: the LK losses' own measure
		// of acceptance, which their kernel computes anyway.
		line["alpha"] = slices.Clone(t.n.alphaK)
	}
	return line
}

// Export reads the layer's weights back from the device and writes the
// draft into job.Out's eagle3/ folder, drafter.json, and last SHA256SUMS
// over them (deleting an earlier one first: see drafters.RemoveSums).
func (t *trainer) Export(job *loop.Job, r *loop.Result[*EvalMetrics]) error {
	cfg, g, voc := t.cfg, t.g, t.voc
	set := cfg.settings()
	t.n.layer.ReadWeights(t.n.dev)
	if err := drafters.RemoveSums(job.Out); err != nil {
		return err
	}
	if err := deagle3.Export(filepath.Join(job.Out, ExportDir), g, t.p, voc, cfg.Export); err != nil {
		return err
	}
	format := cfg.Export.Format
	if format == "" {
		format = deagle3.FormatNative
	}
	var layers []int
	if !cfg.Export.DefaultLayers {
		layers = cfg.Export.LayerIDs
	}
	p := job.Provenance
	manifests := p.DataManifests
	if manifests == nil {
		manifests = map[string]string{}
	}
	err := atomicfile.WriteJSON(filepath.Join(job.Out, ProvenanceFile), provenance{
		Method: string(deagle3.Kind), Variant: g.Variant(), FCNorm: g.FCNorm, NormBeforeFC: g.NormBeforeFC, NormOutput: g.NormOutput,
		Formats: []string{ExportDir}, Format: format,
		Hidden: g.Hidden, Vocab: g.Vocab, DraftVocab: g.DraftVocab, DraftVocabSeen: voc.Seen, TTTSteps: cfg.Steps,
		Loss: set.Loss, LKEta: set.LKEta,
		FeatureLayers: layers, DefaultLayers: cfg.Export.DefaultLayers,
		BaseModel: p.BaseModel, TargetFingerprint: p.TargetFingerprint, TargetLayers: p.TargetLayers, DataManifests: manifests,
		Args: p.Args, Steps: r.Steps, Stopped: r.Stopped, Metrics: r.Best,
	})
	if err != nil {
		return err
	}
	// Last: the sums vouch for the export and drafter.json as they now are.
	files := []string{ProvenanceFile}
	for _, f := range deagle3.ExportFiles() {
		files = append(files, ExportDir+"/"+f)
	}
	return drafters.WriteSums(job.Out, files)
}

// pack splits samples (in the given order) into batches of at most batch
// tokens, each sample counted at its truncated length; a sample longer than
// batch forms a batch of its own. Samples shorter than 3 tokens (no position
// with a target) are skipped.
func pack(order, lengths []int, maxLen, batch int) [][]int {
	var out [][]int
	var cur []int
	used := 0
	for _, i := range order {
		n := min(lengths[i], maxLen)
		if n < 3 {
			continue
		}
		if used+n > batch && len(cur) > 0 {
			out = append(out, cur)
			cur, used = nil, 0
		}
		cur = append(cur, i)
		used += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// fillBatch reads the samples idx (states included) through the buffer s and
// packs them into the net's batch.
func fillBatch(n *net, ds dataset.Dataset, idx []int, s *dataset.Sample) error {
	n.begin()
	for _, i := range idx {
		if err := ds.Sample(i, s, dataset.Final|dataset.Features); err != nil {
			return fmt.Errorf("eagle3: reading sample %d: %w", i, err)
		}
		if err := n.add(s); err != nil {
			return fmt.Errorf("eagle3: sample %d: %w", i, err)
		}
	}
	n.finish()
	return nil
}

// evaluate runs the held-out batches without gradients.
func evaluate(n *net, ds dataset.Dataset, batches [][]int) (EvalMetrics, error) {
	T := n.steps
	lossSum, alphaSum := make([]float64, T), make([]float64, T)
	count, correct, masked := make([]int, T), make([]int, T), make([]int, T)
	tokens := 0
	var s dataset.Sample
	for _, b := range batches {
		if err := fillBatch(n, ds, b, &s); err != nil {
			return EvalMetrics{}, err
		}
		n.forward(false)
		tokens += n.rows
		for k := 0; k < T; k++ {
			lossSum[k] += n.lossK[k] * float64(n.countK[k])
			alphaSum[k] += n.alphaK[k] * float64(n.countK[k])
			count[k] += n.countK[k]
			correct[k] += n.correctK[k]
			masked[k] += n.maskedK[k]
		}
	}
	em := EvalMetrics{StepLoss: make([]float64, T), Accuracy: make([]float64, T), Tokens: tokens, AcceptLen: 1}
	if n.useLK {
		em.Alpha = make([]float64, T)
	}
	prod := 1.0
	for k := 0; k < T; k++ {
		if count[k] > 0 {
			em.StepLoss[k] = lossSum[k] / float64(count[k])
			if em.Alpha != nil {
				em.Alpha[k] = alphaSum[k] / float64(count[k])
			}
		}
		em.Loss += math.Pow(n.decay, float64(k)) * em.StepLoss[k]
		em.Accuracy[k] = ratio(correct[k], masked[k])
		prod *= em.Accuracy[k]
		em.AcceptLen += prod
	}
	return em, nil
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
