// Package eagle3 trains an EAGLE-3 draft layer (pkg/drafters/eagle3) on
// captured target hidden states: it packs samples into batches, computes the
// target distributions and the soft cross-entropy of the draft unrolled for
// several steps ("training-time test", TTT) with gradients flowing through
// the unroll, and runs the training loop (schedule, held-out evaluation,
// early stopping, checkpoints and resume). Parameters, gradients and
// activations are carved once from contiguous buffers, so a training step
// allocates nothing. The layer, its export layouts and its proposer live in
// pkg/drafters/eagle3.
package eagle3

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/drafters"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/optim"
)

// Config holds a training run's settings. DefaultConfig gives values that
// train well without tuning; a zero field is NOT replaced by its default (0
// turns warm-up, clipping, early stopping and logging off).
type Config struct {
	// Target is the frozen target: geometry, embedding and lm_head.
	Target *Target `json:"-"`
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
	// Steps is the TTT unroll length; StepDecay the per-step loss weight base
	// (step k weighs StepDecay^k).
	Steps     int     `json:"ttt_steps"`
	StepDecay float64 `json:"step_decay"`
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
	// Epochs caps the run (the cosine schedule spans it); MaxSteps stops it
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
	// Provenance is recorded in drafter.json.
	Provenance Provenance `json:"-"`
	// Progress, when set, is called after every update and evaluation.
	Progress func(Progress) `json:"-"`
}

// GreedyTargetTemperature is the target temperature for data distilled
// greedily, for greedy serving: on stories260k's greedy captures it beat 1
// and matched 0.25 (docs/performance.md).
const GreedyTargetTemperature = 0.5

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
// 1.5% warm-up, a cosine to zero over an epoch cap of 40, clip 0.5, 7 TTT
// steps weighted 0.8^k, 10% held out and evaluated every epoch, and early
// stopping after 4 evaluations without a lower held-out loss, keeping the
// best weights.
func DefaultConfig() Config {
	return Config{
		DraftVocab: deagle3.DefaultDraftVocab, Steps: 7, StepDecay: 0.8,
		LR: 3e-3, WarmupFrac: 0.015, ClipNorm: 0.5, Beta2: 0.999,
		BatchTokens: 128, MaxLength: 2048, Epochs: 40, Patience: 4,
		EvalFraction: 0.1, LogEvery: 10,
	}
}

func (c *Config) validate() error {
	switch {
	case c.Target == nil:
		return errors.New("eagle3: Config.Target is nil")
	case c.DraftVocab < 1:
		return fmt.Errorf("eagle3: draft vocabulary must be >= 1, got %d", c.DraftVocab)
	case c.Intermediate < 0:
		return fmt.Errorf("eagle3: draft MLP width must be >= 1 (or 0 for the target's), got %d", c.Intermediate)
	case !(c.TargetTemperature >= 0 && c.TargetTemperature <= 100):
		return fmt.Errorf("eagle3: target temperature must lie in (0, 100] (or 0 for 1), got %g", c.TargetTemperature)
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
	case c.Epochs < 1:
		return fmt.Errorf("eagle3: epochs must be >= 1, got %d", c.Epochs)
	case !(c.EvalFraction > 0 && c.EvalFraction < 1):
		return fmt.Errorf("eagle3: held-out fraction must lie in (0,1) (the best weights are chosen by held-out loss), got %g", c.EvalFraction)
	case c.MaxSteps < 0 || c.Patience < 0 || c.EvalEvery < 0 || c.CheckpointEvery < 0 || c.LogEvery < 0:
		return errors.New("eagle3: max steps, patience and the eval/checkpoint/log intervals must not be negative")
	}
	if !c.Export.DefaultLayers { // refused before training rather than at the export
		if err := deagle3.CheckLayerIDs(c.Export.LayerIDs, 0); err != nil {
			return fmt.Errorf("eagle3: feature layers %v: %w", c.Export.LayerIDs, err)
		}
	}
	return nil
}

// Provenance is what drafter.json records about where a run came from.
type Provenance struct {
	// BaseModel is the target's Hub id or path.
	BaseModel string
	// TargetFingerprint identifies the exact target weights.
	TargetFingerprint string
	// DataManifests maps each training data manifest to its SHA-256.
	DataManifests map[string]string
	// Args are the training arguments as given.
	Args any
}

// Progress reports where a run is.
type Progress struct {
	Epoch, Step, TotalSteps int
	Loss, LR                float64
	TokensPerSec            float64
	Eval                    *EvalMetrics // set after an evaluation
}

// EvalMetrics are held-out results: the loss (as trained: sum over steps of
// 0.8^k times the step's mean soft cross-entropy), the per-step accuracy
// acc_k (draft argmax == target argmax among rows whose predicted token is a
// response token; a target argmax outside the draft vocabulary is a miss) and
// the chain acceptance length they imply, 1 + sum_k prod_{j<=k} acc_j.
type EvalMetrics struct {
	Loss       float64   `json:"loss"`
	StepLoss   []float64 `json:"step_loss"`
	Accuracy   []float64 `json:"accuracy"`
	AcceptLen  float64   `json:"accept_length"`
	Tokens     int       `json:"tokens"`
	Epoch      int       `json:"epoch"`
	Step       int       `json:"step"`
	BestSoFar  bool      `json:"best"`
	TrainLoss  float64   `json:"train_loss"`
	ElapsedSec float64   `json:"elapsed_s"`
}

// Result summarises a finished run.
type Result struct {
	// Best is the evaluation of the exported (best) weights; nil when no
	// evaluation ran (a run cut short by MaxSteps before the first), in which
	// case the last weights are exported.
	Best *EvalMetrics
	// Steps are the updates taken in total; Epochs the epochs started.
	Steps, Epochs int
	// Stopped says why training ended: "early-stop", "max-epochs",
	// "max-steps" or "resumed-complete".
	Stopped   string
	Vocab     *deagle3.Vocab
	Geometry  deagle3.Geometry
	ExportDir string
}

// Files Train writes into its output folder.
const (
	// ExportDir is the export's subfolder.
	ExportDir = "eagle3"
	// ProvenanceFile is drafter.json, at the top of the output folder as
	// Medusa's.
	ProvenanceFile = drafters.ProvenanceFile
	// CheckpointFile is the resumable training state.
	CheckpointFile = "checkpoint.safetensors"
	// MetricsFile is the metrics log.
	MetricsFile = "metrics.jsonl"
)

// trainExtra is the trainer-specific part of a checkpoint.
type trainExtra struct {
	Best      float64      `json:"best"` // meaningful when HaveBest
	HaveBest  bool         `json:"have_best"`
	BestEval  *EvalMetrics `json:"best_eval,omitempty"`
	Bad       int          `json:"bad"`
	Done      bool         `json:"done"`
	LastEval  int          `json:"last_eval_step"`
	LossSum   float64      `json:"loss_sum"`
	LossCount int          `json:"loss_count"`
}

// provenance is drafter.json.
type provenance struct {
	Method            string            `json:"method"`
	Formats           []string          `json:"formats"`
	Format            string            `json:"format"`
	Hidden            int               `json:"hidden_size"`
	Vocab             int               `json:"vocab_size"`
	DraftVocab        int               `json:"draft_vocab_size"`
	DraftVocabSeen    int               `json:"draft_vocab_seen"`
	TTTSteps          int               `json:"ttt_steps"`
	FeatureLayers     []int             `json:"feature_layers,omitempty"`
	DefaultLayers     bool              `json:"default_feature_layers"`
	BaseModel         string            `json:"base_model_name_or_path,omitempty"`
	TargetFingerprint string            `json:"target_fingerprint"`
	DataManifests     map[string]string `json:"data_manifests"`
	Args              any               `json:"args"`
	Steps             int               `json:"steps"`
	Stopped           string            `json:"stopped"`
	Metrics           *EvalMetrics      `json:"metrics,omitempty"`
}

// Train trains an EAGLE-3 draft layer on ds (tokens, loss masks, the three
// feature layers and the final post-norm state) and writes into out:
// eagle3/ (the exported draft: config.json, model.safetensors), drafter.json
// (provenance and the final held-out metrics), metrics.jsonl (one JSON object
// per logged update and per evaluation) and checkpoint.safetensors (the
// resumable state). Cancelling ctx saves a checkpoint and returns an error
// wrapping ctx's; a later run with Resume continues and ends bit-identical to
// an uninterrupted run, metrics.jsonl included (timings aside).
func Train(ctx context.Context, cfg Config, ds dataset.Dataset, be tensor.Backend, out string) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tg := cfg.Target
	g := tg.Geometry
	g.DraftVocab = min(cfg.DraftVocab, g.Vocab)
	if cfg.Intermediate > 0 {
		g.Intermediate = cfg.Intermediate
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if len(tg.Embed) != g.Vocab*g.Hidden || len(tg.LMHead) != g.Vocab*g.Hidden {
		return nil, fmt.Errorf("eagle3: target embedding has %d values and lm_head %d, want vocab %d x hidden %d each", len(tg.Embed), len(tg.LMHead), g.Vocab, g.Hidden)
	}
	if ds.Hidden() != g.Hidden {
		return nil, fmt.Errorf("eagle3: the dataset's hidden states have width %d, the target's hidden_size is %d", ds.Hidden(), g.Hidden)
	}
	if ds.NumSamples() < 2 {
		return nil, fmt.Errorf("eagle3: need at least 2 samples (one held out), got %d", ds.NumSamples())
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("eagle3: creating the output folder: %w", err)
	}

	// Split, lengths and the draft vocabulary, from tokens and masks only.
	perm := rand.New(rand.NewPCG(cfg.Seed, 1)).Perm(ds.NumSamples())
	nEval := max(1, int(math.Round(cfg.EvalFraction*float64(ds.NumSamples()))))
	nEval = min(nEval, ds.NumSamples()-1)
	evalIdx, trainIdx := append([]int(nil), perm[:nEval]...), append([]int(nil), perm[nEval:]...)
	sort.Ints(evalIdx)
	sort.Ints(trainIdx)
	lengths := make([]int, ds.NumSamples())
	counts := make([]int64, g.Vocab)
	var smp dataset.Sample
	for _, i := range perm {
		if err := readTokens(ds, i, &smp, g.Vocab); err != nil {
			return nil, fmt.Errorf("eagle3: %w", err)
		}
		lengths[i] = len(smp.Tokens)
	}
	for _, i := range trainIdx {
		if err := readTokens(ds, i, &smp, g.Vocab); err != nil {
			return nil, fmt.Errorf("eagle3: %w", err)
		}
		countInto(counts, &smp)
	}
	voc, err := deagle3.BuildVocab(counts, g.DraftVocab)
	if err != nil {
		return nil, err
	}

	p := deagle3.NewParams(g)
	initParams(p, g, cfg.Seed, tg.LMHead, voc)
	n, err := newNet(g, cfg.Steps, cfg.StepDecay, be, p, tg.Embed, tg.LMHead, voc, max(cfg.BatchTokens, cfg.MaxLength), cfg.MaxLength, true)
	if err != nil {
		return nil, err
	}
	n.invTau = 1 / cfg.targetTemp()
	var params []optim.Param
	grads := n.gr.Tensors(g)
	for i, t := range p.Tensors(g) {
		params = append(params, optim.Param{Name: t.Name, Data: t.Data, Grad: grads[i].Data})
	}
	opt, err := optim.NewAdamW(params, optim.AdamWConfig{Beta1: 0.9, Beta2: cfg.Beta2, Eps: 1e-8, WeightDecay: cfg.WeightDecay})
	if err != nil {
		return nil, err
	}
	best := make([]float32, len(p.All))
	copy(best, p.All)

	// Batches per epoch: a seeded order packed greedily by tokens.
	epochBatches := func(epoch int) [][]int {
		order := append([]int(nil), trainIdx...)
		rand.New(rand.NewPCG(cfg.Seed, uint64(epoch)+2)).Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		return pack(order, lengths, cfg.MaxLength, cfg.BatchTokens)
	}
	total := 0
	for e := 0; e < cfg.Epochs; e++ {
		total += len(epochBatches(e))
	}
	if total == 0 {
		return nil, errors.New("eagle3: no training sample has 3 or more tokens")
	}
	// MaxSteps only truncates: the schedule spans the epoch cap, so a run cut
	// short and resumed follows the same learning rates as one that was not.
	sched := optim.Schedule{Base: cfg.LR, MinRatio: cfg.MinLRRatio, Warmup: int(math.Ceil(cfg.WarmupFrac * float64(total))), Total: total}
	evalBatches := pack(evalIdx, lengths, cfg.MaxLength, max(cfg.BatchTokens, cfg.MaxLength))
	args, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("eagle3: encoding the arguments: %w", err)
	}

	ckpt := filepath.Join(out, CheckpointFile)
	st := &optim.TrainState{Buffers: []optim.Param{{Name: "best", Data: best}}}
	var extra trainExtra
	if cfg.Resume {
		check := func(saved json.RawMessage) error { return sameArgs(saved, cfg) }
		if _, err := optim.Resume(ckpt, opt, st, check, &extra); err != nil {
			return nil, fmt.Errorf("eagle3: %w", err)
		}
	}
	metrics, err := optim.OpenMetrics(filepath.Join(out, MetricsFile), int(opt.StepCount), cfg.Resume)
	if err != nil {
		return nil, fmt.Errorf("eagle3: %w", err)
	}
	defer metrics.Close()
	logLine := func(v any) error {
		if err := metrics.Write(v); err != nil {
			return fmt.Errorf("eagle3: %w", err)
		}
		return nil
	}
	save := func() error {
		st.Args = args
		b, err := json.Marshal(extra)
		if err != nil {
			return fmt.Errorf("eagle3: encoding trainer state: %w", err)
		}
		st.Extra = b
		return optim.SaveCheckpoint(ckpt, opt, st)
	}

	start := time.Now()
	// eval evaluates the current weights, keeps them when they are the best so
	// far, logs the result and updates the early-stopping count.
	eval := func(epoch int) (*EvalMetrics, error) {
		em, err := evaluate(n, ds, evalBatches)
		if err != nil {
			return nil, err
		}
		em.Epoch, em.Step, em.ElapsedSec = epoch+1, int(opt.StepCount), time.Since(start).Seconds()
		if extra.LossCount > 0 {
			em.TrainLoss = extra.LossSum / float64(extra.LossCount)
		}
		extra.LossSum, extra.LossCount, extra.LastEval = 0, 0, em.Step
		if !extra.HaveBest || em.Loss < extra.Best {
			extra.Best, extra.HaveBest, extra.Bad = em.Loss, true, 0
			em.BestSoFar = true
			copy(best, p.All)
			e := em
			extra.BestEval = &e
		} else {
			extra.Bad++
		}
		if err := logLine(map[string]any{"kind": "eval", "epoch": em.Epoch, "step": em.Step, "loss": em.Loss, "step_loss": em.StepLoss,
			"accuracy": em.Accuracy, "accept_length": em.AcceptLen, "train_loss": em.TrainLoss, "best": em.BestSoFar, "elapsed_s": em.ElapsedSec}); err != nil {
			return nil, err
		}
		if cfg.Progress != nil {
			e := em
			cfg.Progress(Progress{Epoch: epoch, Step: em.Step, TotalSteps: total, Loss: em.Loss, LR: sched.LR(em.Step), Eval: &e})
		}
		return &em, nil
	}
	finish := func(reason string) (*Result, error) {
		// The checkpoint keeps the current weights (a max-steps run may be
		// resumed); the export holds the best ones.
		extra.Done = reason != "max-steps"
		if err := save(); err != nil {
			return nil, err
		}
		if extra.HaveBest {
			copy(p.All, best)
		}
		res := &Result{Best: extra.BestEval, Steps: int(opt.StepCount), Epochs: min(st.Epoch+1, cfg.Epochs), Stopped: reason,
			Vocab: voc, Geometry: g, ExportDir: filepath.Join(out, ExportDir)}
		if err := deagle3.Export(res.ExportDir, g, p, voc, cfg.Export); err != nil {
			return nil, err
		}
		format := cfg.Export.Format
		if format == "" {
			format = deagle3.FormatNative
		}
		var layers []int
		if !cfg.Export.DefaultLayers {
			layers = cfg.Export.LayerIDs
		}
		manifests := cfg.Provenance.DataManifests
		if manifests == nil {
			manifests = map[string]string{}
		}
		if err := atomicfile.WriteJSON(filepath.Join(out, ProvenanceFile), provenance{
			Method: string(deagle3.Kind), Formats: []string{ExportDir}, Format: format,
			Hidden: g.Hidden, Vocab: g.Vocab, DraftVocab: g.DraftVocab, DraftVocabSeen: voc.Seen, TTTSteps: cfg.Steps,
			FeatureLayers: layers, DefaultLayers: cfg.Export.DefaultLayers,
			BaseModel: cfg.Provenance.BaseModel, TargetFingerprint: cfg.Provenance.TargetFingerprint, DataManifests: manifests,
			Args: cfg.Provenance.Args, Steps: res.Steps, Stopped: reason, Metrics: extra.BestEval,
		}); err != nil {
			return nil, err
		}
		return res, nil
	}
	if extra.Done {
		return finish("resumed-complete")
	}

	flopsTok := FLOPsPerToken(g, cfg.Steps)
	for ; st.Epoch < cfg.Epochs; st.Epoch, st.Cursor = st.Epoch+1, 0 {
		epoch := st.Epoch
		batches := epochBatches(epoch)
		for ; st.Cursor < len(batches); st.Cursor++ {
			step := int(opt.StepCount)
			if cfg.MaxSteps > 0 && step >= cfg.MaxSteps {
				return finish("max-steps")
			}
			if err := ctx.Err(); err != nil {
				if serr := save(); serr != nil {
					return nil, errors.Join(err, serr)
				}
				return nil, fmt.Errorf("eagle3: training stopped at step %d, checkpoint written to %s (resume to continue): %w", step, ckpt, err)
			}
			t0 := time.Now()
			if err := fillBatch(n, ds, batches[st.Cursor], &smp); err != nil {
				return nil, err
			}
			opt.ZeroGrad()
			loss := n.forward(true)
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				return nil, fmt.Errorf("eagle3: training loss became %v at step %d (lower the learning rate)", loss, step)
			}
			n.backward()
			gnorm := optim.ClipGradNorm(params, cfg.ClipNorm)
			lr := sched.LR(step)
			opt.Step(lr)
			step++
			extra.LossSum += loss
			extra.LossCount++
			tps := float64(n.rows) / time.Since(t0).Seconds()
			if cfg.LogEvery > 0 && step%cfg.LogEvery == 0 {
				acc := make([]float64, cfg.Steps)
				for k := range acc {
					acc[k] = ratio(n.correctK[k], n.maskedK[k])
				}
				if err := logLine(map[string]any{"kind": "train", "epoch": epoch, "step": step, "loss": loss, "lr": lr,
					"grad_norm": gnorm, "accuracy": acc, "tokens": n.rows, "tokens_per_s": tps, "gflops": flopsTok * tps / 1e9}); err != nil {
					return nil, err
				}
			}
			if cfg.Progress != nil {
				cfg.Progress(Progress{Epoch: epoch, Step: step, TotalSteps: total, Loss: loss, LR: lr, TokensPerSec: tps})
			}
			evalNow := step%max(cfg.EvalEvery, 1) == 0
			if cfg.EvalEvery == 0 {
				evalNow = st.Cursor == len(batches)-1
			}
			if evalNow {
				if _, err := eval(epoch); err != nil {
					return nil, err
				}
				if cfg.Patience > 0 && extra.Bad >= cfg.Patience {
					st.Cursor++
					return finish("early-stop")
				}
			}
			// Checkpoints come after the step's evaluation, so one written at
			// step s holds everything up to and including step s.
			if evalNow || (cfg.CheckpointEvery > 0 && step%cfg.CheckpointEvery == 0) {
				st.Cursor++ // the batch is done: a resume starts at the next
				err := save()
				st.Cursor--
				if err != nil {
					return nil, err
				}
			}
		}
	}
	st.Epoch = cfg.Epochs - 1
	if extra.LastEval != int(opt.StepCount) {
		// A final evaluation so the last weights compete for "best".
		if _, err := eval(st.Epoch); err != nil {
			return nil, err
		}
	}
	return finish("max-epochs")
}

// sameArgs rejects a resume whose training arguments differ from the
// checkpoint's. Resume, the step cap, the checkpoint and log intervals may
// change: they do not alter the trained weights. A draft width equal to the
// target's is the same setting as none (checkpoints made before the width
// was a setting record none).
func sameArgs(saved json.RawMessage, cfg Config) error {
	var old Config
	if err := json.Unmarshal(saved, &old); err != nil {
		return fmt.Errorf("decoding the saved arguments: %w", err)
	}
	width := cfg.Target.Geometry.Intermediate
	for _, c := range []*Config{&old, &cfg} {
		c.Resume, c.MaxSteps, c.CheckpointEvery, c.LogEvery = false, 0, 0, 0
		if c.Intermediate == width { // the target's width, given or not
			c.Intermediate = 0
		}
		if c.TargetTemperature == 1 { // 1, given or not
			c.TargetTemperature = 0
		}
	}
	a, _ := json.Marshal(old)
	b, _ := json.Marshal(cfg)
	if string(a) != string(b) {
		return fmt.Errorf("the arguments differ from the checkpoint's (saved %s, now %s)", a, b)
	}
	return nil
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
	lossSum := make([]float64, T)
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
			count[k] += n.countK[k]
			correct[k] += n.correctK[k]
			masked[k] += n.maskedK[k]
		}
	}
	em := EvalMetrics{StepLoss: make([]float64, T), Accuracy: make([]float64, T), Tokens: tokens, AcceptLen: 1}
	prod := 1.0
	for k := 0; k < T; k++ {
		if count[k] > 0 {
			em.StepLoss[k] = lossSum[k] / float64(count[k])
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
