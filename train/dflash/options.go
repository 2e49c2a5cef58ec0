// Package dflash trains a DFlash drafter (pkg/drafters/dflash) with the
// shared training loop (train/loop): per sequence, up to Anchors anchor
// positions p sampled among the response positions whose next token is
// also a response token; one block per anchor (slot 0 the token at p, slots
// 1..B-1 the mask token, at positions p..p+B-1) attending to the context
// features strictly before p and to its own block only; slot k trained
// toward the token at p+k with weight exp(-(k-1)/Gamma), the loss the
// weighted mean cross-entropy through the target's frozen lm_head. See
// ../shared/docs/methods.md section 3.
package dflash

import (
	"context"
	"errors"
	"fmt"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	ddflash "github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/train/loop"
)

// Options are `drafter train dflash`'s settings; the value is the method
// train.Run trains with (loop.Method). Start from DefaultOptions.
type Options struct {
	// BlockSize is B: one draft forward drafts B-1 tokens (--block-size;
	// default 8, z-lab ships 16).
	BlockSize int `json:"block_size"`
	// DraftLayers is the number of draft decoder layers n (--draft-layers;
	// default 3; the z-lab and SpecForge recipes use 5 on 8B targets).
	DraftLayers int `json:"draft_layers"`
	// Layers are the fused target layers as Hugging Face hidden_states
	// indices (--layers); nil takes z-lab's default for DraftLayers layers
	// (layerids.DFlashDefault, converted to HF indices).
	Layers []int `json:"layers,omitempty"`
	// Gamma is the position decay of the loss, w_k = exp(-(k-1)/Gamma)
	// (--gamma); 0 chooses 7 for blocks of 16 or more (SpecForge) and 4
	// below (DeepSpec's B=7 recipe).
	Gamma float64 `json:"gamma"`
	// Anchors caps the anchors sampled per sequence (--anchors; default
	// 128, SpecForge 512 on 3-4k-token sequences).
	Anchors int `json:"anchors"`
	// MaskToken is the token id of slots 1..B-1 (--mask-token); -1 chooses
	// the least frequent token of the training samples (lowest id on ties),
	// which for a Llama tokenizer is typically <unk> (id 0). The chosen id
	// is written into the export and drafter.json.
	MaskToken int `json:"mask_token_id"`
	// Causal trains causal attention within a block instead of DFlash's
	// bidirectional block (--causal); the export records it.
	Causal bool `json:"causal"`
	// Intermediate is the draft MLP width (0: the target's).
	Intermediate int `json:"intermediate_size,omitempty"`
	// Training is the optimiser, the schedule and the loop's intervals.
	Training
	// Format is the export layout (ddflash.FormatNative default, or
	// ddflash.FormatSpeculators).
	Format string `json:"format"`
	// Progress, when set, is called after every update and evaluation.
	Progress func(loop.Progress[*EvalMetrics]) `json:"-"`
}

// Training are the settings both block trainers (this package's and
// train/dspark's) share: the optimiser, the schedule and the loop's
// intervals. Both Options embed it, so that its fields keep their JSON keys
// and their place among the options in train_args.json and drafter.json.
type Training struct {
	// LR is the peak learning rate; WarmupFrac the linear warm-up share;
	// MinLRRatio the cosine floor; ClipNorm the gradient-norm clip;
	// WeightDecay and Beta2 AdamW's.
	LR          float64 `json:"lr"`
	WarmupFrac  float64 `json:"warmup_frac"`
	MinLRRatio  float64 `json:"min_lr_ratio"`
	ClipNorm    float64 `json:"clip_norm"`
	WeightDecay float64 `json:"weight_decay"`
	Beta2       float64 `json:"beta2"`
	// BatchSeqs is the sequences per update; MaxLength truncates each.
	BatchSeqs int `json:"batch_seqs"`
	MaxLength int `json:"max_length"`
	// Epochs caps the run; MaxSteps stops it after that many updates (0:
	// no limit); Patience stops it after that many evaluations without a
	// lower held-out loss (0: never early).
	Epochs   int `json:"epochs"`
	MaxSteps int `json:"max_steps"`
	Patience int `json:"patience"`
	// EvalEvery is the updates between evaluations (0: every epoch);
	// EvalFraction the held-out share of samples (at least one).
	EvalEvery    int     `json:"eval_every"`
	EvalFraction float64 `json:"eval_fraction"`
	// Seed drives initialisation, the split, the order and the anchors.
	Seed uint64 `json:"seed"`
	// CheckpointEvery and LogEvery are the loop's intervals.
	CheckpointEvery int `json:"checkpoint_every"`
	LogEvery        int `json:"log_every"`
}

// DefaultTraining returns the shared defaults: one sequence per update of
// at most 2048 tokens, AdamW at lr 3e-3 with 4% warm-up, cosine to zero,
// clip 1 and no weight decay (SpecForge's), 10 epochs with early stopping
// after 4 evaluations without improvement, a tenth held out.
func DefaultTraining() Training {
	return Training{LR: 3e-3, WarmupFrac: 0.04, ClipNorm: 1, Beta2: 0.999,
		BatchSeqs: 1, MaxLength: 2048, Epochs: 10, Patience: 4, EvalFraction: 0.1, LogEvery: 10}
}

// Validate checks the settings; minLength is the shortest MaxLength the
// method trains on (a sequence must hold an anchor and its labels). The
// errors name no method: the caller prefixes its own. The comparisons are
// written to fail on NaN as well.
func (tr *Training) Validate(minLength int) error {
	switch {
	case !(tr.LR > 0):
		return fmt.Errorf("lr must be > 0, got %g", tr.LR)
	case !(tr.WarmupFrac >= 0 && tr.WarmupFrac < 1):
		return fmt.Errorf("warm-up fraction must lie in [0,1), got %g", tr.WarmupFrac)
	case !(tr.MinLRRatio >= 0 && tr.MinLRRatio <= 1):
		return fmt.Errorf("min-lr ratio must lie in [0,1], got %g", tr.MinLRRatio)
	case !(tr.Beta2 > 0 && tr.Beta2 < 1):
		return fmt.Errorf("beta2 must lie in (0,1), got %g", tr.Beta2)
	case tr.WeightDecay < 0:
		return fmt.Errorf("weight decay must not be negative, got %g", tr.WeightDecay)
	case tr.BatchSeqs < 1 || tr.MaxLength < minLength:
		return fmt.Errorf("batch sequences must be >= 1 and max length >= %d, got %d and %d", minLength, tr.BatchSeqs, tr.MaxLength)
	case tr.Epochs < 1:
		return fmt.Errorf("epochs must be >= 1, got %d", tr.Epochs)
	case !(tr.EvalFraction > 0 && tr.EvalFraction < 1):
		return fmt.Errorf("held-out fraction must lie in (0,1), got %g", tr.EvalFraction)
	case tr.MaxSteps < 0 || tr.Patience < 0 || tr.EvalEvery < 0 || tr.CheckpointEvery < 0 || tr.LogEvery < 0:
		return errors.New("max steps, patience and the eval/checkpoint/log intervals must not be negative")
	}
	return nil
}

// Common returns the settings the shared flags (loop.Common) carry, as
// their defaults.
func (tr *Training) Common() loop.Common {
	return loop.Common{LR: tr.LR, MinLRRatio: tr.MinLRRatio, WarmupFrac: tr.WarmupFrac, WeightDecay: tr.WeightDecay, ClipNorm: tr.ClipNorm,
		ValFraction: tr.EvalFraction, Epochs: tr.Epochs, MaxSteps: tr.MaxSteps, Patience: tr.Patience, EvalEvery: tr.EvalEvery,
		CheckpointEvery: tr.CheckpointEvery, LogEvery: tr.LogEvery, Seed: tr.Seed}
}

// SetCommon takes the shared flags' values.
func (tr *Training) SetCommon(c loop.Common) {
	tr.LR, tr.MinLRRatio, tr.WarmupFrac, tr.WeightDecay, tr.ClipNorm = c.LR, c.MinLRRatio, c.WarmupFrac, c.WeightDecay, c.ClipNorm
	tr.EvalFraction, tr.Epochs, tr.MaxSteps, tr.Patience, tr.EvalEvery = c.ValFraction, c.Epochs, c.MaxSteps, c.Patience, c.EvalEvery
	tr.CheckpointEvery, tr.LogEvery, tr.Seed = c.CheckpointEvery, c.LogEvery, c.Seed
}

// RegisterFlags declares the shared settings that loop.Common lacks on fs;
// maxLength is --max-length's help.
func (tr *Training) RegisterFlags(fs loop.FlagSet, maxLength string) {
	fs.IntVar(&tr.BatchSeqs, "batch-seqs", tr.BatchSeqs, "sequences per optimiser step, 1 or more")
	fs.IntVar(&tr.MaxLength, "max-length", tr.MaxLength, maxLength)
	fs.Float64Var(&tr.Beta2, "beta2", tr.Beta2, "AdamW's second-moment rate, in (0,1)")
}

// LoopConfig is the loop's configuration for a block trainer of method
// with settings (recorded in train_args.json) and tr's schedule.
func LoopConfig[M loop.Metric[M]](tr Training, method string, settings any, resume bool, progress func(loop.Progress[M])) loop.Config[M] {
	return loop.Config[M]{Method: method, Settings: settings,
		LR: tr.LR, MinLRRatio: tr.MinLRRatio, ClipNorm: tr.ClipNorm, MaxSteps: tr.MaxSteps, Patience: tr.Patience,
		EvalEvery: tr.EvalEvery, CheckpointEvery: tr.CheckpointEvery, LogEvery: tr.LogEvery, Resume: resume, Progress: progress}
}

// DefaultOptions returns the defaults: B 8 (7 drafts) with gamma 4
// (DeepSpec's decay for B 7), 3 draft layers, up to 128 anchors per
// sequence, the mask token chosen from the data, a bidirectional block, one
// sequence per update, and AdamW at lr 3e-3 with 4% warm-up, cosine to zero,
// clip 1 and no weight decay (SpecForge's), 10 epochs with early stopping
// after 4 evaluations without improvement.
//
// Measured on stories260k (1000 greedy-distilled samples of 128 new tokens,
// 3 epochs, B 8, eval on the 40 stories-eval prompts at T=0, chain of 7;
// mean acceptance length): the baseline 2 layers, 64 anchors, gamma 4, lr
// 3e-3 gave 2.51; gamma 7 2.46; lr 1e-3 2.31; 3 layers 2.71; 128 anchors
// 2.69; 3 layers with 128 anchors (these defaults) 2.92 (simulated on the
// held-out samples: 3.77).
func DefaultOptions() Options {
	return Options{BlockSize: 8, DraftLayers: ddflash.DefaultDraftLayers, Anchors: 128, MaskToken: -1, Training: DefaultTraining()}
}

// gamma returns the loss decay, 0 chosen by block size.
func (o *Options) gamma() float64 {
	switch {
	case o.Gamma > 0:
		return o.Gamma
	case o.BlockSize >= 16:
		return 7
	}
	return 4
}

func (o *Options) validate() error {
	switch {
	case o.BlockSize < 2:
		return fmt.Errorf("dflash: block size must be >= 2 (the anchor and one draft), got %d", o.BlockSize)
	case o.DraftLayers < 1:
		return fmt.Errorf("dflash: draft layers must be >= 1, got %d", o.DraftLayers)
	case o.Gamma < 0:
		return fmt.Errorf("dflash: gamma must be positive (or 0 for the default), got %g", o.Gamma)
	case o.Anchors < 1:
		return fmt.Errorf("dflash: anchors must be >= 1, got %d", o.Anchors)
	case o.MaskToken < -1:
		return fmt.Errorf("dflash: mask token id must be >= 0 (or -1 to choose), got %d", o.MaskToken)
	case o.Intermediate < 0:
		return fmt.Errorf("dflash: intermediate size must be >= 1 (or 0 for the target's), got %d", o.Intermediate)
	}
	if err := o.Training.Validate(3); err != nil {
		return fmt.Errorf("dflash: %w", err)
	}
	if o.Format != "" && o.Format != ddflash.FormatNative && o.Format != ddflash.FormatSpeculators {
		return fmt.Errorf("dflash: export format %q is not %q or %q", o.Format, ddflash.FormatNative, ddflash.FormatSpeculators)
	}
	return nil
}

var _ loop.Method = Options{}

// Kind is dflash.
func (o Options) Kind() drafters.Kind { return ddflash.Kind }

// featureLayers returns the HF indices of the fused layers for a target of
// L layers.
func (o Options) featureLayers(L int) ([]int, error) {
	if o.Layers == nil {
		return ddflash.DefaultLayers(L, o.DraftLayers)
	}
	layers, err := CheckLayers(o.Layers, L, "")
	if err != nil {
		return nil, fmt.Errorf("dflash: %w", err)
	}
	return layers, nil
}

// CheckLayers checks fused target layers given as Hugging Face
// hidden_states indices (--layers) against a target of L layers and returns
// a copy. ascending, when not empty, also requires them strictly ascending
// and is the reason the error gives. The errors name no method: the caller
// prefixes its own.
func CheckLayers(layers []int, L int, ascending string) ([]int, error) {
	if len(layers) == 0 {
		return nil, errors.New("--layers names no layer")
	}
	for i, k := range layers {
		if k < 1 || k > L {
			return nil, fmt.Errorf("feature layer %d is outside the hidden_states indices [1, %d] of this %d-layer target (0 is the embedding output)", k, L, L)
		}
		if ascending != "" && i > 0 && k <= layers[i-1] {
			return nil, fmt.Errorf("feature layers %v must be strictly ascending (%s)", layers, ascending)
		}
	}
	return append([]int(nil), layers...), nil
}

// Columns are the fused feature layers.
func (o Options) Columns(c *checkpoint.Config) (loop.Columns, error) {
	return Columns(c, o.validate, o.featureLayers, o.Layers != nil)
}

// Train trains a DFlash draft for the target and exports it into
// s.Job.Out's dflash/ folder.
func (o Options) Train(ctx context.Context, s *loop.Setup) (*loop.Outcome, error) {
	layers, err := o.featureLayers(s.Target.Config.NumLayers)
	if err != nil {
		return nil, err
	}
	in, job, err := SetupInputs(s, layers)
	if err != nil {
		return nil, err
	}
	r, err := Train(ctx, o, in, &job)
	if err != nil {
		return nil, err
	}
	return Outcome(&r.Result, r.ExportDir, r), nil
}
