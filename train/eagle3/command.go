package eagle3

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/drafter-ai/drafter/pkg/drafters"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/train/loop"
)

// The --variant names: EAGLE-3.1's norms (fc_norm and norm_output) or plain
// EAGLE-3.
const (
	VariantEAGLE31 = "eagle3.1"
	VariantEAGLE3  = "eagle3"
)

// Command is `drafter train eagle3` (loop.Command), and drafter train
// --method eagle3 (loop.Legacy). Its flags start at zero, or at the
// trainer's default, with help quoting DefaultConfig: a flag left out keeps
// the trainer's default, some of which (the epoch cap, the target
// temperature, the draft's MLP width) come from the data or the target.
type Command struct{}

var _ loop.Legacy = Command{}

// Kind is eagle3.
func (Command) Kind() drafters.Kind { return deagle3.Kind }

// Short is the subcommand's one-line description.
func (Command) Short() string { return "Train an EAGLE-3 draft layer on captured hidden states" }

// Long is the subcommand's help.
func (Command) Long() string {
	return `train eagle3 trains one EAGLE-3 draft layer over the fused low/middle/high target features
(--layers, in ascending order), with training-time test, the target frozen. Exported to
out/eagle3/ (--format native or speculators). --fc-norm, --norm-before-fc and --norm-output
train EAGLE-3.1's norms (off: plain EAGLE-3, for engines that predate 3.1); drafter.json's
variant says which it is.`
}

// Example is the subcommand's examples.
func (Command) Example() string {
	return `  drafter train eagle3 --model /models/my-sft --data caps/a,caps/b --out drafters/eagle3 --format speculators
  drafter train eagle3 --model /models/my-sft --data caps/a --out drafters/eagle3 --layers 2,16,29 --warmup 0.02`
}

// Settings names EAGLE-3's settings in messages.
func (Command) Settings() string { return "an EAGLE-3" }

// LegacyFlags: drafter train --method eagle3 reads --layers and --warmup,
// which it shares with Medusa, as the subcommand does.
func (Command) LegacyFlags() []loop.LegacyFlag {
	return []loop.LegacyFlag{
		{Name: "layers", Flag: "layers", Want: "for eagle3 it takes 3 Hugging Face hidden_states indices, low,mid,high (for example 2,16,29)"},
		{Name: "warmup", Flag: "warmup", Want: "for eagle3 it is the warm-up fraction of all updates, in [0,1) (0 turns it off)"},
	}
}

// Hints point a user of Medusa's flags to EAGLE-3's.
func (Command) Hints() map[string]string {
	return map[string]string{"blocks": "EAGLE-3 has one draft layer; --layers are its feature layers", "warmup-steps": "the warm-up is --warmup, a fraction of all updates"}
}

// Flags declares EAGLE-3's settings on fs.
func (Command) Flags(fs loop.FlagSet) func(changed func(string) bool) (loop.Method, error) {
	opts := Options{Config: DefaultConfig()}
	cfg := &opts.Config
	var f struct {
		tttSteps, draftVocab, intermediate, maxLength int
		tttDecay, targetTemp, warmupFrac              float64
		format, variant                               string
		layers                                        string
		fcNorm, normBeforeFC, normOutput              bool
	}
	fs.StringVar(&f.layers, "layers", "", "the 3 feature layers as Hugging Face hidden_states indices low,mid,high in ascending order (default 2,L/2,L-3, or 1,(L+1)/2,L below 7 layers; must have been captured)")
	fs.Float64Var(&f.warmupFrac, "warmup", cfg.WarmupFrac, "linear warm-up as a fraction of all updates, in [0,1); 0 disables")
	fs.IntVar(&f.tttSteps, "ttt-steps", cfg.Steps, "training-time-test unroll length, 1 or more")
	fs.Float64Var(&f.tttDecay, "ttt-decay", cfg.StepDecay, "loss weight of unrolled step k is decay^k, in (0,1]")
	fs.IntVar(&f.draftVocab, "draft-vocab", cfg.DraftVocab, "draft vocabulary size N, 1 or more (the N most frequent response tokens; capped at the target's vocabulary)")
	fs.IntVar(&f.intermediate, "intermediate", 0, "MLP width of the draft layer, 1 or more, written as its intermediate_size (default: the target's intermediate_size)")
	fs.Float64Var(&f.targetTemp, "target-temperature", 0, fmt.Sprintf("the draft learns softmax(target logits / this), in (0, 100] (default %g when all --data was distilled greedily, else 1)", GreedyTargetTemperature))
	fs.IntVar(&f.maxLength, "max-length", 0, fmt.Sprintf("truncate samples to this many tokens, 3 or more (default %d); a sample longer than --batch-tokens trains as a batch of its own", cfg.MaxLength))
	fs.StringVar(&f.format, "format", deagle3.FormatNative, "export layout: native (EAGLE/SpecForge/SGLang, also loaded by vLLM) or speculators")
	fs.StringVar(&f.variant, "variant", variantOf(*cfg), "eagle3.1 (--fc-norm and --norm-output, the default: the most accepted on held-out prompts, docs/acceptance.md) or eagle3 (plain EAGLE-3, for engines that predate EAGLE-3.1); --fc-norm, --norm-before-fc and --norm-output given with it refine it")
	fs.BoolVar(&f.fcNorm, "fc-norm", cfg.FCNorm, "EAGLE-3.1: an RMSNorm on each feature layer before fc (exported as fc_norm); excludes --norm-before-fc. Engines that predate EAGLE-3.1 ignore it")
	fs.BoolVar(&f.normBeforeFC, "norm-before-fc", cfg.NormBeforeFC, "one RMSNorm over the fused features before fc (exported as norm_before_fc) instead of --fc-norm's per-feature ones (given alone, it turns --fc-norm off)")
	fs.BoolVar(&f.normOutput, "norm-output", cfg.NormOutput, "EAGLE-3.1: each step feeds the next the final norm's output, the lm_head's input, instead of the pre-norm output (exported as norm_output)")
	loss := loop.RegisterLoss(fs, "against the target's distribution over the draft vocabulary", &cfg.Loss, &cfg.LKEta)
	epochsDefault := fmt.Sprintf("from the data: enough epochs to see %gM tokens, 2 to 40", float64(AutoTokens)/1e6)
	if cfg.Epochs != 0 {
		epochsDefault = fmt.Sprint(cfg.Epochs)
	}
	given := loop.RegisterGiven(fs, loop.Given{LR: &cfg.LR, MinLRRatio: &cfg.MinLRRatio, WeightDecay: &cfg.WeightDecay, ClipNorm: &cfg.ClipNorm,
		ValFraction: &cfg.EvalFraction, Epochs: &cfg.Epochs, MaxSteps: &cfg.MaxSteps, Patience: &cfg.Patience, EvalEvery: &cfg.EvalEvery,
		BatchTokens: &cfg.BatchTokens, CheckpointEvery: &cfg.CheckpointEvery, LogEvery: &cfg.LogEvery, Seed: &cfg.Seed},
		loop.GivenRules{
			Metric:        "loss",
			EpochsDefault: epochsDefault,
			Batch:         "tokens per optimiser step, 3 or more: whole samples are packed up to it and a longer sample trains alone (one sample per step for samples over half of it)",
			BatchWant:     "3 or more tokens per step",
			BatchOK:       func(n int) bool { return n >= 3 },
			ValFraction:   "fraction of the samples held out for evaluation, in (0,1): the best weights are kept by held-out loss",
			ValWant:       "a fraction in (0,1): the trainer keeps the best weights by held-out loss",
			ValOK:         func(v float64) bool { return v > 0 && v < 1 },
		})
	return func(changed func(string) bool) (loop.Method, error) {
		if err := given(changed); err != nil {
			return nil, err
		}
		if err := loop.CheckGiven(changed,
			loop.Rule{Flag: "ttt-steps", Bad: f.tttSteps < 1, Value: f.tttSteps, Want: "an unroll length of 1 or more"},
			loop.Rule{Flag: "ttt-decay", Bad: !(f.tttDecay > 0 && f.tttDecay <= 1), Value: f.tttDecay, Want: "a loss decay per step in (0,1]"},
			loop.Rule{Flag: "draft-vocab", Bad: f.draftVocab < 1, Value: f.draftVocab, Want: "a vocabulary size of 1 or more"},
			loop.Rule{Flag: "intermediate", Bad: f.intermediate < 1, Value: f.intermediate, Want: "an MLP width of 1 or more"},
			loop.Rule{Flag: "target-temperature", Bad: !(f.targetTemp > 0 && f.targetTemp <= 100), Value: f.targetTemp, Want: "a temperature in (0, 100]"},
			loop.Rule{Flag: "max-length", Bad: f.maxLength < 3, Value: f.maxLength, Want: "3 or more tokens (a sample needs 3 tokens to train a step)"},
			loop.Rule{Flag: "warmup", Bad: !(f.warmupFrac >= 0 && f.warmupFrac < 1), Value: f.warmupFrac, Want: "the warm-up fraction of all updates, in [0,1) (0 turns it off)"},
		); err != nil {
			return nil, err
		}
		if changed("variant") {
			switch f.variant {
			case VariantEAGLE3:
				cfg.FCNorm, cfg.NormOutput = false, false
			case VariantEAGLE31:
				cfg.FCNorm, cfg.NormOutput = true, true
			default:
				return nil, fmt.Errorf("--variant %q: want %s or %s", f.variant, VariantEAGLE31, VariantEAGLE3)
			}
		}
		if changed("norm-before-fc") && f.normBeforeFC && !changed("fc-norm") {
			// One norm over the fused features replaces the per-feature ones.
			cfg.FCNorm = false
		}
		if changed("layers") {
			layers, err := loop.ParseLayers("layers", f.layers)
			if err != nil {
				return nil, err
			}
			if err := checkLayers(layers); err != nil {
				return nil, err
			}
			opts.Layers = layers
		}
		if err := loss(changed); err != nil {
			return nil, err
		}
		loop.Assign(changed, "ttt-steps", &cfg.Steps, f.tttSteps)
		loop.Assign(changed, "ttt-decay", &cfg.StepDecay, f.tttDecay)
		loop.Assign(changed, "draft-vocab", &cfg.DraftVocab, f.draftVocab)
		loop.Assign(changed, "intermediate", &cfg.Intermediate, f.intermediate)
		loop.Assign(changed, "target-temperature", &cfg.TargetTemperature, f.targetTemp)
		loop.Assign(changed, "max-length", &cfg.MaxLength, f.maxLength)
		loop.Assign(changed, "warmup", &cfg.WarmupFrac, f.warmupFrac)
		loop.Assign(changed, "fc-norm", &cfg.FCNorm, f.fcNorm)
		loop.Assign(changed, "norm-before-fc", &cfg.NormBeforeFC, f.normBeforeFC)
		loop.Assign(changed, "norm-output", &cfg.NormOutput, f.normOutput)
		if cfg.FCNorm && cfg.NormBeforeFC {
			return nil, fmt.Errorf("--fc-norm and --norm-before-fc exclude each other: one norm per feature layer before fc (EAGLE-3.1, on by default: --norm-before-fc alone turns it off), or one over their concatenation")
		}
		if changed("format") {
			if f.format != deagle3.FormatNative && f.format != deagle3.FormatSpeculators {
				return nil, &loop.FlagError{Flag: "format", Value: f.format, Want: deagle3.FormatNative + " or " + deagle3.FormatSpeculators}
			}
			cfg.Export.Format = f.format
		}
		return opts, nil
	}
}

// variantOf names the variant c's switches make (the default's, for the
// help).
func variantOf(c Config) string {
	if c.FCNorm && c.NormOutput && !c.NormBeforeFC {
		return VariantEAGLE31
	}
	return VariantEAGLE3
}

// checkLayers checks --layers: three hidden_states indices, ascending and
// distinct. The serving engines gather the auxiliary states in ascending
// layer order, each once, whatever order the draft's config lists: vLLM's
// LlamaModel.forward (vllm/model_executor/models/llama.py) walks the decoder
// layers and keeps the state entering layer idx when idx is in
// aux_hidden_state_layers, and its GPU model runner
// (vllm/v1/worker/gpu_model_runner.py) concatenates that list for the
// EAGLE-3 draft; SGLang's LlamaModel.forward
// (python/sglang/srt/models/llama.py) does the same with layers_to_capture,
// which LlamaForCausalLM.set_eagle3_layers_to_capture sets. A draft trained
// on 5,3,1 would be served its features as 1,3,5, and one trained on 3,3,3
// would get one copy of layer 3 where it expects three.
func checkLayers(layers []int) error {
	parts := make([]string, len(layers))
	for i, k := range layers {
		parts[i] = strconv.Itoa(k)
	}
	text := strings.Join(parts, ",")
	if len(layers) != 3 {
		return fmt.Errorf("--layers %s: want 3 Hugging Face hidden_states indices, low,mid,high (for example 2,16,29), got %d", text, len(layers))
	}
	if slices.ContainsFunc(layers, func(k int) bool { return k < 1 }) {
		return fmt.Errorf("--layers %s: want hidden_states indices of 1 or more (0 is the embedding output)", text)
	}
	u := slices.Compact(slices.Sorted(slices.Values(layers)))
	switch {
	case len(u) < 3:
		return fmt.Errorf("--layers %s: engines gather each feature layer once; give 3 distinct hidden_states indices in ascending order", text)
	case !slices.Equal(u, layers):
		return fmt.Errorf("--layers %s: engines gather the feature layers in ascending order; use --layers %d,%d,%d", text, u[0], u[1], u[2])
	}
	return nil
}
