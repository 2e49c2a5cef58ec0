package dspark

import (
	"context"
	"errors"
	"fmt"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	ddflash "github.com/drafter-ai/drafter/pkg/drafters/dflash"
	ddspark "github.com/drafter-ai/drafter/pkg/drafters/dspark"
	tdflash "github.com/drafter-ai/drafter/train/dflash"
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
	// Training is the optimiser, the schedule and the loop's intervals,
	// train/dflash's (so that both methods read and check them alike).
	tdflash.Training
	// Progress, when set, is called after every update and evaluation.
	Progress func(loop.Progress[*EvalMetrics]) `json:"-"`
}

// DefaultOptions returns the defaults: DeepSpec's B 7 (7 drafts), γ 4, loss
// weights 0.1/0.9/1.0, a vanilla Markov head with both heads on and the
// confidence head reading the Markov row; 3 draft layers
// (ddspark.DefaultDraftLayers: on the bundled model they accept far more
// than one, at three times the draft cost; DeepSpec uses 5 for Qwen3-8B);
// Markov rank 32. Rank:
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
		Anchors: 64, MaskToken: -1, Training: tdflash.DefaultTraining()}
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
	}
	if err := o.Training.Validate(2); err != nil {
		return fmt.Errorf("dspark: %w", err)
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
	layers, err := tdflash.CheckLayers(o.Layers, L, "DeepSpec's target_layer_ids are")
	if err != nil {
		return nil, fmt.Errorf("dspark: %w", err)
	}
	return layers, nil
}

// Columns are the fused feature layers (and, as for every method, the
// final-norm state: the L1 and confidence targets).
func (m Method) Columns(c *checkpoint.Config) (loop.Columns, error) {
	return tdflash.Columns(c, m.validate, m.featureLayers, m.Layers != nil)
}

// Train trains a DSpark draft for the target and exports it into
// s.Job.Out's dspark/ folder.
func (m Method) Train(ctx context.Context, s *loop.Setup) (*loop.Outcome, error) {
	layers, err := m.featureLayers(s.Target.Config.NumLayers)
	if err != nil {
		return nil, err
	}
	in, job, err := tdflash.SetupInputs(s, layers)
	if err != nil {
		return nil, err
	}
	r, err := Train(ctx, m.Options, in, &job)
	if err != nil {
		return nil, err
	}
	return tdflash.Outcome(&r.Result, r.ExportDir, r), nil
}
