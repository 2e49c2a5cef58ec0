package dspark

import (
	"context"
	"errors"
	"fmt"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	ddflash "github.com/drafter-ai/drafter/pkg/drafters/dflash"
	ddspark "github.com/drafter-ai/drafter/pkg/drafters/dspark"
	"github.com/drafter-ai/drafter/train/loop"
)

// Options are `drafter train dspark`'s settings: the method train.Run
// trains with (loop.Method). DefaultOptions gives values that train well
// without tuning; a zero field is NOT replaced by its default.
type Options struct {
	// BlockSize is B: the block [anchor, mask × B-1] drafts B tokens (every
	// slot drafts: slot k predicts x_{p+k+1}).
	BlockSize int `json:"block_size"`
	// DraftLayers is the number of backbone decoder layers n; Layers
	// overrides the fused target layers (HF hidden_states indices; nil:
	// DFlash's defaults for n draft layers, one per layer).
	DraftLayers int   `json:"draft_layers"`
	Layers      []int `json:"-"`
	// Intermediate is the draft MLP width (0: the target's).
	Intermediate int `json:"intermediate_size,omitempty"`
	// MarkovRank is the Markov head's rank r (0: none, DeepSpec's shifted
	// DFlash baseline).
	MarkovRank int `json:"markov_rank"`
	// Confidence enables the confidence head; ConfidenceWithMarkov feeds
	// it [o_k ; W1[prev_k]].
	Confidence           bool `json:"enable_confidence_head"`
	ConfidenceWithMarkov bool `json:"confidence_head_with_markov"`
	// Loss weighs the terms (DefaultLossWeights); Gamma is the slot decay
	// exp(-k/γ).
	Loss  LossWeights `json:"loss"`
	Gamma float64     `json:"loss_decay_gamma"`
	// Anchors is the most blocks drawn per sequence (num_anchors).
	Anchors int `json:"num_anchors"`
	// MaskToken is the id of slots 1..B-1; -1 chooses the training data's
	// least frequent token (a row the mask slots can own).
	MaskToken int `json:"mask_token_id"`
	// Format is the export layout (ddspark.FormatDeepSpec or
	// ddspark.FormatSpeculators; "" the former).
	Format string `json:"format"`
	// The optimiser and schedule: peak LR, linear warm-up share, cosine
	// floor, global-norm clip, AdamW's decay and β2.
	LR          float64 `json:"lr"`
	WarmupFrac  float64 `json:"warmup_frac"`
	MinLRRatio  float64 `json:"min_lr_ratio"`
	ClipNorm    float64 `json:"clip_norm"`
	WeightDecay float64 `json:"weight_decay"`
	Beta2       float64 `json:"beta2"`
	// BatchSeqs sequences per update, each truncated to MaxLength tokens.
	BatchSeqs int `json:"batch_seqs"`
	MaxLength int `json:"max_length"`
	// Epochs caps the run; MaxSteps cuts it short (0: no cap); Patience
	// stops it after that many evaluations without a lower held-out loss.
	Epochs   int `json:"epochs"`
	MaxSteps int `json:"max_steps"`
	Patience int `json:"patience"`
	// EvalEvery updates between evaluations (0: every epoch); EvalFraction
	// of the sequences is held out.
	EvalEvery    int     `json:"eval_every"`
	EvalFraction float64 `json:"eval_fraction"`
	// Seed drives initialisation, the split, the order and the anchors.
	Seed            uint64 `json:"seed"`
	CheckpointEvery int    `json:"checkpoint_every"`
	LogEvery        int    `json:"log_every"`
	// Progress, when set, is called after every update and evaluation.
	Progress func(loop.Progress[*EvalMetrics]) `json:"-"`
}

// DefaultOptions returns the defaults: DeepSpec's B 7 (7 drafts), γ 4, loss
// weights 0.1/0.9/1.0, a vanilla Markov head with both heads on and the
// confidence head reading the Markov row; one draft layer (DeepSpec uses 5
// for Qwen3-8B, whose draft is a fifth of the target; for a small target
// one layer is already a large share of its cost); Markov rank 32. Rank:
// DeepSpec's 256 is 1/16 of Qwen3-8B's width 4096 over 151k tokens; on a
// 512-token, width-64 target a rank that small (4) could hold little of a
// 512 × 512 bigram table, while 32 (half the width) holds its dominant
// transitions at 2·512·32 = 32k parameters (about a tenth of the backbone)
// and makes the confidence head's input 64 + 32. 64 anchors per sequence,
// mask token chosen from the data, and the optimiser of the DFlash trainer
// (train/dflash): AdamW lr 3e-3 (SpecForge's and DeepSpec's 6e-4 are tuned
// for millions of tokens), 4% warm-up, cosine to zero, clip 1, no weight
// decay, one sequence per update, 10 epochs with early stopping after 4
// evaluations without improvement.
func DefaultOptions() Options {
	return Options{BlockSize: 7, DraftLayers: ddspark.DefaultDraftLayers, MarkovRank: 32,
		Confidence: true, ConfidenceWithMarkov: true, Loss: DefaultLossWeights(), Gamma: 4,
		Anchors: 64, MaskToken: -1, LR: 3e-3, WarmupFrac: 0.04, ClipNorm: 1, Beta2: 0.999,
		BatchSeqs: 1, MaxLength: 2048, Epochs: 10, Patience: 4, EvalFraction: 0.1, LogEvery: 10}
}

func (o *Options) headShape() ddspark.HeadShape {
	return ddspark.HeadShape{Rank: o.MarkovRank, Confidence: o.Confidence, WithMarkov: o.Confidence && o.ConfidenceWithMarkov}
}

func (o *Options) validate() error {
	switch {
	case o.BlockSize < 1:
		return fmt.Errorf("dspark: block size must be >= 1 (every slot drafts), got %d", o.BlockSize)
	case o.DraftLayers < 1:
		return fmt.Errorf("dspark: draft layers must be >= 1, got %d", o.DraftLayers)
	case o.Intermediate < 0:
		return fmt.Errorf("dspark: intermediate size must be >= 1 (or 0 for the target's), got %d", o.Intermediate)
	case o.Confidence && o.ConfidenceWithMarkov && o.MarkovRank == 0:
		return errors.New("dspark: confidence_head_with_markov needs a Markov head (markov_rank > 0)")
	case o.Gamma < 0:
		return fmt.Errorf("dspark: gamma must be positive (or 0: no decay), got %g", o.Gamma)
	case o.Anchors < 1:
		return fmt.Errorf("dspark: anchors must be >= 1, got %d", o.Anchors)
	case o.MaskToken < -1:
		return fmt.Errorf("dspark: mask token id must be >= 0 (or -1 to choose), got %d", o.MaskToken)
	case o.Format != "" && o.Format != ddspark.FormatDeepSpec && o.Format != ddspark.FormatSpeculators:
		return fmt.Errorf("dspark: export format %q, want %s or %s", o.Format, ddspark.FormatDeepSpec, ddspark.FormatSpeculators)
	case !(o.LR > 0):
		return fmt.Errorf("dspark: lr must be > 0, got %g", o.LR)
	case !(o.WarmupFrac >= 0 && o.WarmupFrac < 1):
		return fmt.Errorf("dspark: warm-up fraction must lie in [0,1), got %g", o.WarmupFrac)
	case !(o.MinLRRatio >= 0 && o.MinLRRatio <= 1):
		return fmt.Errorf("dspark: min-lr ratio must lie in [0,1], got %g", o.MinLRRatio)
	case !(o.Beta2 > 0 && o.Beta2 < 1):
		return fmt.Errorf("dspark: beta2 must lie in (0,1), got %g", o.Beta2)
	case o.WeightDecay < 0:
		return fmt.Errorf("dspark: weight decay must not be negative, got %g", o.WeightDecay)
	case o.BatchSeqs < 1 || o.MaxLength < 2:
		return fmt.Errorf("dspark: batch sequences must be >= 1 and max length >= 2, got %d and %d", o.BatchSeqs, o.MaxLength)
	case o.Epochs < 1:
		return fmt.Errorf("dspark: epochs must be >= 1, got %d", o.Epochs)
	case !(o.EvalFraction > 0 && o.EvalFraction < 1):
		return fmt.Errorf("dspark: held-out fraction must lie in (0,1), got %g", o.EvalFraction)
	case o.MaxSteps < 0 || o.Patience < 0 || o.EvalEvery < 0 || o.CheckpointEvery < 0 || o.LogEvery < 0:
		return errors.New("dspark: max steps, patience and the eval/checkpoint/log intervals must not be negative")
	}
	if err := o.Loss.validate(); err != nil {
		return err
	}
	if o.Loss.Confidence > 0 && !o.Confidence {
		return errors.New("dspark: a confidence loss weight without a confidence head")
	}
	return nil
}

// Method is DSpark as drafter train runs it (loop.Method): its options.
type Method struct{ Options }

var _ loop.Method = Method{}

// Kind is dspark.
func (m Method) Kind() drafters.Kind { return ddspark.Kind }

// featureLayers returns the HF indices of the fused layers for a target of
// L layers.
func (o *Options) featureLayers(L int) ([]int, error) {
	if o.Layers == nil {
		return ddflash.DefaultLayers(L, o.DraftLayers)
	}
	if len(o.Layers) == 0 {
		return nil, errors.New("dspark: --layers names no layer")
	}
	for i, k := range o.Layers {
		if k < 1 || k > L {
			return nil, fmt.Errorf("dspark: feature layer %d is outside the hidden_states indices [1, %d] of this %d-layer target (0 is the embedding output)", k, L, L)
		}
		if i > 0 && k <= o.Layers[i-1] {
			return nil, fmt.Errorf("dspark: feature layers %v must be strictly ascending (DeepSpec's target_layer_ids are)", o.Layers)
		}
	}
	return append([]int(nil), o.Layers...), nil
}

// Columns are the fused feature layers (and, as for every method, the
// final-norm state: the L1 and confidence targets).
func (m Method) Columns(c *checkpoint.Config) (loop.Columns, error) {
	if err := m.validate(); err != nil {
		return loop.Columns{}, err
	}
	layers, err := m.featureLayers(c.NumLayers)
	if err != nil {
		return loop.Columns{}, err
	}
	return loop.Columns{FeatureLayers: layers, FromFlag: m.Layers != nil}, nil
}

// Train trains a DSpark draft for the target and exports it into
// s.Job.Out's dspark/ folder.
func (m Method) Train(ctx context.Context, s *loop.Setup) (*loop.Outcome, error) {
	c := s.Target.Config
	layers, err := m.featureLayers(c.NumLayers)
	if err != nil {
		return nil, err
	}
	embed, lmHead, err := s.OutputLayers(true)
	if err != nil {
		return nil, err
	}
	job := s.Job
	if job.Settings != nil {
		job.Settings.FeatureLayers = layers
	}
	in := Inputs{Config: c, Layers: layers, Embed: embed, LMHead: lmHead, Data: s.Data, Resume: s.Resume, TargetName: s.Target.Name()}
	r, err := Train(ctx, m.Options, in, &job)
	if err != nil {
		return nil, err
	}
	return &loop.Outcome{Steps: r.Steps, Epochs: r.Epochs, Stopped: r.Stopped, Exports: []string{r.ExportDir}, Result: r}, nil
}
