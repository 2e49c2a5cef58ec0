package dflash

import (
	"github.com/drafter-ai/drafter/pkg/drafters"
	ddflash "github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/train/loop"
)

// Command is `drafter train dflash` (loop.Command): the method's flags,
// with DefaultOptions' values as their defaults.
type Command struct{}

var _ loop.Command = Command{}

// Kind is dflash.
func (Command) Kind() drafters.Kind { return ddflash.Kind }

// Short is the subcommand's one-line description.
func (Command) Short() string {
	return "Train a DFlash drafter (one forward drafts a block; target features injected into every layer)"
}

// Long is the subcommand's help.
func (Command) Long() string {
	return `Trains a DFlash draft (z-lab, arXiv 2602.06036): --draft-layers Qwen3-style decoder layers
whose keys and values over the context are the fused target features (fc over the --layers
hidden states, then a norm), and whose block [last verified token, mask, ..., mask] of
--block-size slots drafts B-1 tokens in one forward. Trained on up to --anchors blocks per
sequence, each seeing only the context strictly before its anchor, with the cross-entropy of
slot k weighted exp(-(k-1)/gamma), through the target's frozen embedding and lm_head. The data
must hold the feature layers (by default z-lab's for --draft-layers layers) and the final-norm
state. The export is z-lab's DFlashDraftModel layout (--format native: vLLM, SGLang,
TensorRT-LLM) or speculators' dflash layout (vLLM).`
}

// Flags declares the settings on fs.
func (Command) Flags(fs loop.FlagSet) func(changed func(string) bool) (loop.Method, error) {
	o := DefaultOptions()
	c := o.Common()
	c.Register(fs)
	var layers string
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "block size B: one draft forward drafts B-1 tokens (2 or more)")
	fs.IntVar(&o.DraftLayers, "draft-layers", o.DraftLayers, "draft decoder layers (1 or more); without --layers also the number of fused target layers")
	fs.StringVar(&layers, "layers", "", "fused target layers as Hugging Face hidden_states indices, comma-separated (default: z-lab's for --draft-layers; they must have been captured)")
	fs.IntVar(&o.Intermediate, "intermediate-size", o.Intermediate, "draft MLP width, 0 = the target's")
	fs.Float64Var(&o.Gamma, "gamma", o.Gamma, "slot decay exp(-(k-1)/gamma); 0 = 7 for blocks of 16 or more, else 4")
	fs.IntVar(&o.Anchors, "anchors", o.Anchors, "blocks drawn per sequence, 1 or more")
	fs.IntVar(&o.MaskToken, "mask-token", o.MaskToken, "token id of the mask slots, -1 = the data's least frequent token")
	fs.BoolVar(&o.Causal, "causal", o.Causal, "causal attention within the block instead of DFlash's bidirectional block (exported as is_causal)")
	o.Format = ddflash.FormatNative
	fs.StringVar(&o.Format, "format", o.Format, "export layout: native (z-lab DFlashDraftModel) or speculators")
	o.RegisterFlags(fs, "tokens kept of each sequence")
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
		return o, nil
	}
}
