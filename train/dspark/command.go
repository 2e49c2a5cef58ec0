package dspark

import (
	"github.com/drafter-ai/drafter/pkg/drafters"
	ddspark "github.com/drafter-ai/drafter/pkg/drafters/dspark"
	"github.com/drafter-ai/drafter/train/loop"
)

// Command is `drafter train dspark` (loop.Command): the method's flags,
// with DefaultOptions' values as their defaults.
type Command struct{}

var _ loop.Command = Command{}

// Kind is dspark.
func (Command) Kind() drafters.Kind { return ddspark.Kind }

// Short is the subcommand's one-line description.
func (Command) Short() string {
	return "Train a DSpark drafter (DFlash backbone, shifted block, Markov and confidence heads)"
}

// Long is the subcommand's help.
func (Command) Long() string {
	return `Trains a DSpark draft (DeepSeek, arXiv 2607.05147): DFlash's block-parallel backbone, whose
block [last token, mask, ...] drafts B tokens in one forward (every slot drafts: slot k predicts
the token k+1 places after the anchor), a low-rank Markov head that adds a bias for the previous
drafted token to each slot's logits, and a confidence head that predicts each slot's acceptance.
The loss is DeepSpec's: 0.1·CE + 0.9·L1(draft, target distribution) + 1.0·BCE(confidence,
acceptance), every slot weighted exp(-k/gamma). The data must hold the feature layers (by
default DFlash's for --draft-layers layers) and the final-norm state. The export is DeepSpec's
Qwen3DSparkModel layout (--format deepspec) or speculators' dspark layout.`
}

// Flags declares the settings on fs.
func (Command) Flags(fs loop.FlagSet) func(changed func(string) bool) (loop.Method, error) {
	o := DefaultOptions()
	c := o.Common()
	c.Register(fs)
	var layers string
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "block size B: one backbone pass drafts B tokens (1 or more)")
	fs.IntVar(&o.DraftLayers, "draft-layers", o.DraftLayers, "backbone decoder layers (1 or more); without --layers also the number of fused target layers")
	fs.StringVar(&layers, "layers", "", "fused target layers as Hugging Face hidden_states indices, ascending, comma-separated (default: DFlash's for --draft-layers; they must have been captured)")
	fs.IntVar(&o.Intermediate, "intermediate-size", o.Intermediate, "backbone MLP width, 0 = the target's")
	fs.IntVar(&o.MarkovRank, "markov-rank", o.MarkovRank, "rank of the Markov head, 0 = none (DeepSpec's shifted DFlash baseline)")
	fs.BoolVar(&o.Confidence, "confidence-head", o.Confidence, "train the confidence head (exported as enable_confidence_head)")
	fs.BoolVar(&o.ConfidenceWithMarkov, "confidence-with-markov", o.ConfidenceWithMarkov, "feed the confidence head the Markov row of the previous token as well (needs --markov-rank above 0)")
	fs.Float64Var(&o.Loss.CE, "ce-weight", o.Loss.CE, "weight of the cross-entropy term, 0 or more")
	fs.Float64Var(&o.Loss.L1, "l1-weight", o.Loss.L1, "weight of the L1 distance to the target distribution, 0 or more")
	fs.Float64Var(&o.Loss.Confidence, "confidence-weight", o.Loss.Confidence, "weight of the confidence head's binary cross-entropy, 0 or more")
	fs.Float64Var(&o.Gamma, "gamma", o.Gamma, "slot decay exp(-k/gamma); 0 = no decay")
	fs.IntVar(&o.Anchors, "anchors", o.Anchors, "blocks drawn per sequence, 1 or more")
	fs.IntVar(&o.MaskToken, "mask-token", o.MaskToken, "token id of the mask slots, -1 = the data's least frequent token")
	fs.StringVar(&o.Format, "format", ddspark.FormatDeepSpec, "export layout: deepspec (Qwen3DSparkModel) or speculators")
	o.RegisterFlags(fs, "tokens kept of each sequence, 2 or more")
	return func(changed func(string) bool) (loop.Method, error) {
		if err := c.Check(); err != nil {
			return nil, err
		}
		o.SetCommon(c)
		if changed("layers") {
			var err error
			if o.Layers, err = loop.ParseLayers("layers", layers); err != nil {
				return nil, err
			}
		}
		if err := o.validate(); err != nil {
			return nil, err
		}
		return Method{o}, nil
	}
}
