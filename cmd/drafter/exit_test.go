package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Base command lines whose flags pass every check; the cases below add one
// mistake each. Paths need not exist: the commands are stubbed.
var (
	inspectArgs  = []string{"inspect", "--model", "m"}
	generateArgs = []string{"generate", "--model", "m", "--prompt", "p"}
	distillArgs  = []string{"distill", "--model", "m", "--prompts", "p.jsonl", "--out", "o"}
	captureArgs  = []string{"capture", "--model", "m", "--conversations", "c.jsonl", "--out", "o"}
	medusaArgs   = []string{"train", "medusa", "--model", "m", "--data", "d", "--out", "o"}
	eagle3Args   = []string{"train", "eagle3", "--model", "m", "--data", "d", "--out", "o"}
	byMedusa     = []string{"train", "--method", "medusa", "--model", "m", "--data", "d", "--out", "o"}
	byEAGLE3     = []string{"train", "--method", "eagle3", "--model", "m", "--data", "d", "--out", "o"}
	evalArgs     = []string{"eval", "--model", "m", "--drafter", "d", "--prompts", "p.jsonl"}
)

func with(base []string, extra ...string) []string {
	return append(append([]string(nil), base...), extra...)
}

// TestExitCodes runs every flag check of every command through the command
// tree, without running anything: 2 for every command-line mistake, with a
// message naming the flag; 0 for the valid values at the edges of each rule.
func TestExitCodes(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		// Mistakes cobra finds, in every command.
		{[]string{"nosuch"}, exitUsage, `unknown command "nosuch"`},
		{[]string{"inspect"}, exitUsage, `required flag(s) "model" not set`},
		{with(inspectArgs, "--bogus"), exitUsage, "unknown flag: --bogus"},
		{with(inspectArgs, "stray"), exitUsage, "takes no arguments"},
		{[]string{"train", "hydra", "--model", "m"}, exitUsage, `unknown command "hydra" for "drafter train"`},
		{[]string{"train", "medusa", "--model", "m"}, exitUsage, `required flag(s) "data", "out" not set`},
		{[]string{"eval", "--model", "m"}, exitUsage, "required flag(s)"},
		{with(distillArgs, "--batch", "x"), exitUsage, `invalid argument "x" for "--batch"`},
		{with(generateArgs, "--seed", "-1"), exitUsage, `invalid argument "-1" for "--seed"`},

		// tokenize
		{[]string{"tokenize", "--model", "m"}, exitUsage, "give either TEXT arguments or --chat FILE.json"},
		{[]string{"tokenize", "--model", "m", "--chat", "c.json", "text"}, exitUsage, "give either TEXT arguments or --chat FILE.json"},
		{[]string{"tokenize", "--model", "m", "--chat", "c.json", "--special"}, exitUsage, "--special applies to TEXT arguments"},
		{[]string{"tokenize", "--model", "m", "--special", "a", "b"}, exitOK, ""},

		// Sampling flags, refused whatever the temperature (generate, distill, eval).
		{with(generateArgs, "--top-p", "2"), exitUsage, "--top-p 2: want a probability mass in [0, 1]"},
		{with(generateArgs, "--top-p", "-0.1"), exitUsage, "--top-p -0.1: want"},
		{with(generateArgs, "--top-k", "-5"), exitUsage, "--top-k -5: want 0 (disabled) or a positive number"},
		{with(generateArgs, "--min-p", "2"), exitUsage, "--min-p 2: want a fraction in [0, 1]"},
		{with(generateArgs, "--temperature", "-1"), exitUsage, "--temperature -1: want 0 (greedy) or a positive temperature"},
		{with(generateArgs, "--temperature", "NaN"), exitUsage, `invalid argument "NaN" for "--temperature" flag: want a finite number`},
		{with(generateArgs, "--top-p", "Inf"), exitUsage, "want a finite number"},
		{with(generateArgs, "--max-new-tokens", "0"), exitUsage, "--max-new-tokens 0: want a positive number of tokens"},
		{with(generateArgs, "--max-new-tokens", "-3"), exitUsage, "--max-new-tokens -3"},
		{with(generateArgs, "--top-p", "1", "--top-k", "0", "--min-p", "1", "--temperature", "0"), exitOK, ""},
		{with(distillArgs, "--top-p", "2"), exitUsage, "--top-p 2: want"},
		{with(evalArgs, "--min-p", "-1"), exitUsage, "--min-p -1: want"},

		// distill and capture
		{with(distillArgs, "--batch", "0"), exitUsage, "--batch 0: want an integer from 1 to 1024"},
		{with(distillArgs, "--batch", "-3"), exitUsage, "--batch -3: want an integer from 1 to 1024"},
		{with(distillArgs, "--batch", "1025"), exitUsage, "--batch 1025: want an integer from 1 to 1024"},
		{with(distillArgs, "--batch", "1024"), exitOK, ""},
		{with(distillArgs, "--samples-per-prompt", "0"), exitUsage, "--samples-per-prompt 0: want an integer from 1 to 1024"},
		{with(distillArgs, "--samples-per-prompt", "5000"), exitUsage, "--samples-per-prompt 5000"},
		{with(distillArgs, "--shard", "0/0"), exitUsage, "--shard 0/0: want i/n with n >= 1 and 0 <= i < n"},
		{with(distillArgs, "--shard", "1/0"), exitUsage, "--shard 1/0: want i/n with n >= 1"},
		{with(distillArgs, "--shard", "2/2"), exitUsage, "--shard 2/2: want i/n"},
		{with(distillArgs, "--shard", "-1/2"), exitUsage, "--shard -1/2: want i/n"},
		{with(distillArgs, "--shard", "1/2x"), exitUsage, `--shard "1/2x": want i/n, e.g. 0/4`},
		{with(distillArgs, "--shard", ""), exitUsage, `--shard "": want i/n`},
		{with(distillArgs, "--shard", "3/8"), exitOK, ""},
		{with(distillArgs, "--shard-mb", "0"), exitUsage, "--shard-mb 0: want a size in MiB above 0 and at most 1048576"},
		{with(distillArgs, "--shard-mb", "-1"), exitUsage, "--shard-mb -1: want"},
		{with(distillArgs, "--shard-mb", "2e6"), exitUsage, "--shard-mb 2e+06: want"},
		{with(distillArgs, "--shard-mb", "NaN"), exitUsage, "want a finite number"},
		{with(distillArgs, "--shard-mb", "0.5"), exitOK, ""},
		{with(distillArgs, "--shard-rows", "-1"), exitUsage, "--shard-rows -1: want 0 (no row limit)"},
		{with(distillArgs, "--layers", "-1,3"), exitUsage, "--layers -1,3: want Hugging Face hidden_states indices >= 0"},
		{with(distillArgs, "--layers", "5,3,0,3"), exitOK, ""}, // stored sorted, each once
		{with(distillArgs, "--dtype", "bf16"), exitUsage, "--dtype bf16: want float16 or float32"},
		// distill --generator
		{with(distillArgs, "--concurrency", "3"), exitUsage, "--concurrency applies to --generator only"},
		{with(distillArgs, "--generator-api", "tgi"), exitUsage, "--generator-api applies to --generator only"},
		{with(distillArgs, "--generator-model", "m"), exitUsage, "--generator-model applies to --generator only"},
		{with(distillArgs, "--request-timeout", "1m"), exitUsage, "--request-timeout applies to --generator only"},
		{with(distillArgs, "--api-key-env", "K"), exitUsage, "--api-key-env applies to --generator only"},
		{with(distillArgs, "--generator", ""), exitUsage, "--generator : want one or more base URLs"},
		{with(distillArgs, "--generator", "ftp://x"), exitUsage, `--generator ftp://x: want base URLs such as http://vllm-0:8000 or https://host/prefix, without credentials ("ftp://x" is not one)`},
		{with(distillArgs, "--generator", "vllm-0:8000"), exitUsage, `("vllm-0:8000" is not one)`},
		{with(distillArgs, "--generator", "http://u:pw@h:8000"), exitUsage, "without credentials"},
		{with(distillArgs, "--generator", "http://h:8000,http://h:8000/v1/"), exitUsage, "want each server once (http://h:8000 and http://h:8000/v1/ are the same server)"},
		{with(distillArgs, "--generator", "http://h:8000", "--generator-api", "grpc"), exitUsage, "--generator-api grpc: want openai, llamacpp or tgi"},
		{with(distillArgs, "--generator", "http://h:8000", "--concurrency", "0"), exitUsage, "--concurrency 0: want 1 to 4096 requests in flight"},
		{with(distillArgs, "--generator", "http://h:8000", "--concurrency", "5000"), exitUsage, "--concurrency 5000: want 1 to 4096"},
		{with(distillArgs, "--generator", "http://h:8000", "--request-timeout", "0s"), exitUsage, "--request-timeout 0s: want a positive duration"},
		{with(distillArgs, "--generator", "http://h:8000", "--request-timeout", "-1m"), exitUsage, "--request-timeout -1m0s: want a positive duration"},
		{with(distillArgs, "--generator", "http://h:8000", "--request-timeout", "10"), exitUsage, `invalid argument "10" for "--request-timeout"`},
		{with(distillArgs, "--generator", "http://h:8000", "--api-key-env", ""), exitUsage, "--api-key-env : want the name of an environment variable"},
		{with(distillArgs, "--generator", "http://h:8000,https://gw/llm/v1", "--generator-api", "llamacpp", "--concurrency", "4096", "--request-timeout", "1ms"), exitOK, ""},
		{with(distillArgs, "--generator", "http://h:8000", "--concurrency", "1", "--shard", "3/8"), exitOK, ""},
		{with(captureArgs, "--batch", "0"), exitUsage, "--batch 0: want an integer from 1 to 1024"},
		{with(captureArgs, "--shard-mb", "0"), exitUsage, "--shard-mb 0: want"},
		{with(captureArgs, "--shard-rows", "-5"), exitUsage, "--shard-rows -5"},
		{with(captureArgs, "--layers", "-2"), exitUsage, "--layers -2: want"},
		{with(captureArgs, "--dtype", "int8"), exitUsage, "--dtype int8"},
		{with(captureArgs, "--shard", "0/2"), exitUsage, "unknown flag: --shard"},

		// train, both spellings: flags that do not apply.
		{with(byMedusa[:1], "--method", "hydra", "--model", "m", "--data", "d", "--out", "o"), exitUsage, `--method "hydra": want one of medusa, eagle3`},
		{with(byMedusa[:1], "--method", "dflash", "--model", "m", "--data", "d", "--out", "o"), exitUsage, "--method dflash: train it with drafter train dflash"},
		{[]string{"train", "dflash", "--model", "m", "--data", "d", "--out", "o", "--block-size", "1"}, exitUsage, "dflash: block size must be >= 2"},
		{[]string{"train", "dspark", "--model", "m", "--data", "d", "--out", "o", "--layers", "2,x"}, exitUsage, "--layers 2,x: want comma-separated hidden_states indices"},
		{[]string{"train", "dspark", "--model", "m", "--data", "d", "--out", "o", "--epochs", "0"}, exitUsage, "--epochs 0: want an epoch cap of 1 or more"},
		{[]string{"train", "dflash", "--model", "m", "--data", "d", "--out", "o", "--heads", "3"}, exitUsage, "unknown flag: --heads"},
		{with(byMedusa, "--ttt-steps", "3"), exitUsage, "--ttt-steps is an EAGLE-3 setting; it does not apply to --method medusa"},
		{with(byMedusa, "--format", "native"), exitUsage, "--format is an EAGLE-3 setting"},
		{with(byMedusa, "--intermediate", "64"), exitUsage, "--intermediate is an EAGLE-3 setting"},
		{with(byMedusa, "--target-temperature", "1"), exitUsage, "--target-temperature is an EAGLE-3 setting"},
		{with(byEAGLE3, "--heads", "3"), exitUsage, "--heads is a Medusa setting; it does not apply to --method eagle3"},
		{with(byEAGLE3, "--dtype", "bf16"), exitUsage, "--dtype is a Medusa setting"},
		{with(medusaArgs, "--layers", "2"), exitUsage, "unknown flag: --layers: residual blocks per head are --blocks"},
		{with(medusaArgs, "--warmup", "2"), exitUsage, "unknown flag: --warmup: the warm-up in optimiser steps is --warmup-steps"},
		{with(medusaArgs, "--ttt-steps", "2"), exitUsage, "unknown flag: --ttt-steps"},
		{with(eagle3Args, "--heads", "2"), exitUsage, "unknown flag: --heads"},
		{with(eagle3Args, "--blocks", "2"), exitUsage, "unknown flag: --blocks: EAGLE-3 has one draft layer"},
		{with(eagle3Args, "--warmup-steps", "2"), exitUsage, "unknown flag: --warmup-steps: the warm-up is --warmup"},
		{with(eagle3Args, "--method", "eagle3"), exitUsage, "unknown flag: --method"},

		// train: --data entries are folders, folders of them, or glob patterns.
		{with(medusaArgs, "--data", "runs/d-["), exitUsage, `--data d,runs/d-[: want capture folders, folders of them, or glob patterns such as 'runs/d-*' ("runs/d-[" is not a valid pattern)`},
		{with(byEAGLE3, "--data", `runs/\`), exitUsage, `("runs/\\" is not a valid pattern)`},
		{with(eagle3Args, "--data", "runs/d-*"), exitOK, ""},
		{with(medusaArgs, "--data", "runs"), exitOK, ""},

		// train: --layers and --warmup by method.
		{with(byMedusa, "--layers", "1,2,3"), exitUsage, "--layers 1,2,3: for medusa it is the number of residual blocks per head"},
		{with(byMedusa, "--layers", "-1"), exitUsage, "--layers -1: want the number of residual blocks per head, 0 or more"},
		{with(medusaArgs, "--blocks", "-1"), exitUsage, "--blocks -1: want the number of residual blocks per head, 0 or more"},
		{with(byMedusa, "--warmup", "0.02"), exitUsage, "--warmup 0.02: for medusa it is a number of optimiser steps"},
		{with(byMedusa, "--warmup", "-1"), exitUsage, "--warmup -1: want a number of optimiser steps, 0 or more"},
		{with(medusaArgs, "--warmup-steps", "-1"), exitUsage, "--warmup-steps -1: want a number of optimiser steps"},
		{with(byEAGLE3, "--layers", "2,3"), exitUsage, "--layers 2,3: want 3 Hugging Face hidden_states indices, low,mid,high (for example 2,16,29), got 2"},
		{with(byEAGLE3, "--layers", "a,b,c"), exitUsage, "--layers a,b,c: for eagle3 it takes 3 Hugging Face hidden_states indices"},
		{with(byEAGLE3, "--layers", "5,3,1"), exitUsage, "--layers 5,3,1: engines gather the feature layers in ascending order; use --layers 1,3,5"},
		{with(eagle3Args, "--layers", "5,3,1"), exitUsage, "--layers 5,3,1: engines gather the feature layers in ascending order; use --layers 1,3,5"},
		{with(eagle3Args, "--layers", "2,1,3"), exitUsage, "use --layers 1,2,3"},
		{with(byEAGLE3, "--layers", "3,3,3"), exitUsage, "--layers 3,3,3: engines gather each feature layer once; give 3 distinct hidden_states indices in ascending order"},
		{with(eagle3Args, "--layers", "3,1,3"), exitUsage, "--layers 3,1,3: engines gather each feature layer once"},
		{with(eagle3Args, "--layers", "0,1,3"), exitUsage, "--layers 0,1,3: want hidden_states indices of 1 or more (0 is the embedding output)"},
		{with(eagle3Args, "--layers", "1,2"), exitUsage, "got 2"},
		{with(eagle3Args, "--layers", "1,3,5"), exitOK, ""},
		{with(byEAGLE3, "--layers", "1, 3,5"), exitOK, ""},
		{with(byEAGLE3, "--warmup", "100"), exitUsage, "--warmup 100: want the warm-up fraction of all updates, in [0,1)"},
		{with(byEAGLE3, "--warmup", "-0.1"), exitUsage, "--warmup -0.1: want the warm-up fraction"},
		{with(byEAGLE3, "--warmup", "x"), exitUsage, "--warmup x: for eagle3 it is the warm-up fraction"},
		{with(byEAGLE3, "--warmup", "NaN"), exitUsage, "--warmup NaN: for eagle3 it is the warm-up fraction"},
		{with(eagle3Args, "--warmup", "1"), exitUsage, "--warmup 1: want the warm-up fraction"},

		// train: values, both methods.
		{with(byMedusa, "--lr", "NaN"), exitUsage, `invalid argument "NaN" for "--lr" flag: want a finite number`},
		{with(eagle3Args, "--lr", "-Inf"), exitUsage, "want a finite number"},
		{with(byMedusa, "--lr", "0"), exitUsage, "--lr 0: want a learning rate above 0"},
		{with(eagle3Args, "--lr", "-1"), exitUsage, "--lr -1: want a learning rate above 0"},
		{with(medusaArgs, "--min-lr-ratio", "2"), exitUsage, "--min-lr-ratio 2: want a fraction of --lr in [0,1]"},
		{with(eagle3Args, "--weight-decay", "-1"), exitUsage, "--weight-decay -1: want 0 or a positive weight decay"},
		{with(byMedusa, "--clip-norm", "-1"), exitUsage, "--clip-norm -1: want 0 (no clipping) or a positive gradient norm"},
		{with(eagle3Args, "--clip-norm", "-1"), exitUsage, "--clip-norm -1"},
		{with(medusaArgs, "--clip-norm", "0"), exitOK, ""},
		{with(byMedusa, "--patience", "-1"), exitUsage, "--patience -1: want 0 (never stop early)"},
		{with(eagle3Args, "--max-steps", "-1"), exitUsage, "--max-steps -1: want 0 (no limit)"},
		{with(medusaArgs, "--eval-every", "-1"), exitUsage, "--eval-every -1: want 0 (once per epoch)"},
		{with(medusaArgs, "--checkpoint-every", "-1"), exitUsage, "--checkpoint-every -1: want 0 (at evaluations only)"},
		{with(eagle3Args, "--log-every", "-1"), exitUsage, "--log-every -1: want 0 (no training lines)"},
		{with(byMedusa, "--heads", "0"), exitUsage, "--heads 0: want 1 to 16 heads"},
		{with(medusaArgs, "--heads", "1000"), exitUsage, "--heads 1000: want 1 to 16 heads"},
		{with(medusaArgs, "--heads", "16"), exitOK, ""},
		{with(medusaArgs, "--head-decay", "0"), exitUsage, "--head-decay 0: want a loss decay per head in (0,1]"},
		{with(byMedusa, "--head-decay", "1.5"), exitUsage, "--head-decay 1.5"},
		{with(byMedusa, "--dtype", "int8"), exitUsage, "--dtype int8: want f32, bf16 or f16"},
		{with(byMedusa, "--epochs", "-1"), exitUsage, "--epochs -1: want an epoch cap of 1 or more, or 0 to choose it from the data"},
		{with(medusaArgs, "--epochs", "0"), exitOK, ""},
		{with(byMedusa, "--batch-tokens", "-8"), exitUsage, "--batch-tokens -8: want tokens per step, 1 or more, or 0 to choose them from the data"},
		{with(byMedusa, "--val-fraction", "1"), exitUsage, "--val-fraction 1: want a fraction in [0,1)"},
		{with(medusaArgs, "--val-fraction", "0"), exitOK, ""},
		{with(byEAGLE3, "--ttt-steps", "0"), exitUsage, "--ttt-steps 0: want an unroll length of 1 or more"},
		{with(eagle3Args, "--ttt-decay", "0"), exitUsage, "--ttt-decay 0: want a loss decay per step in (0,1]"},
		{with(eagle3Args, "--draft-vocab", "0"), exitUsage, "--draft-vocab 0: want a vocabulary size of 1 or more"},
		{with(byEAGLE3, "--intermediate", "0"), exitUsage, "--intermediate 0: want an MLP width of 1 or more"},
		{with(byEAGLE3, "--target-temperature", "0"), exitUsage, "--target-temperature 0: want a temperature in (0, 100]"},
		{with(eagle3Args, "--target-temperature", "-1"), exitUsage, "--target-temperature -1"},
		{with(eagle3Args, "--target-temperature", "100"), exitOK, ""},
		{with(byEAGLE3, "--max-length", "2"), exitUsage, "--max-length 2: want 3 or more tokens"},
		{with(eagle3Args, "--epochs", "0"), exitOK, ""},
		{with(eagle3Args, "--epochs", "-1"), exitUsage, "--epochs -1: want an epoch cap of 1 or more, or 0 to choose it from the data"},
		{with(byEAGLE3, "--batch-tokens", "2"), exitUsage, "--batch-tokens 2: want 3 or more tokens per step"},
		{with(byEAGLE3, "--val-fraction", "0"), exitUsage, "--val-fraction 0: want a fraction in (0,1)"},
		{with(byEAGLE3, "--format", "gguf"), exitUsage, "--format gguf: want native or speculators"},

		// eval
		{with(evalArgs, "--limit", "-1"), exitUsage, "--limit -1: want 0 (all prompts) or a positive number"},
		{with(evalArgs, "--limit", "0"), exitOK, ""},
		{with(evalArgs, "--min-acceptance", "-1"), exitUsage, "--min-acceptance -1: want 0 (no gate)"},
		{with(evalArgs, "--min-acceptance", "NaN"), exitUsage, "want a finite number"},
		{with(evalArgs, "--depth", "-1"), exitUsage, "--depth -1: want 0 (the default"},
		{with(evalArgs, "--topk", "-1"), exitUsage, "--topk -1: want 0 (the default, 8)"},
		{with(evalArgs, "--total-tokens", "-1"), exitUsage, "--total-tokens -1: want 0 (the default, 60)"},
		// Values no draft can take: refused with the range, not left to fail
		// (exit 1) or to allocate a tree the size of the context.
		{with(evalArgs, "--total-tokens", "1"), exitUsage, "--total-tokens 1: want 0 (the default, 60) or 2 to 1024 positions"},
		{with(evalArgs, "--total-tokens", "100000"), exitUsage, "--total-tokens 100000: want 0 (the default, 60) or 2 to 1024 positions"},
		{with(evalArgs, "--total-tokens", "2"), exitOK, ""},
		{with(evalArgs, "--total-tokens", "1024"), exitOK, ""},
		{with(evalArgs, "--topk", "100000"), exitUsage, "--topk 100000: want 0 (the default, 8) or 1 to 64 children"},
		{with(evalArgs, "--topk", "64"), exitOK, ""},
		{with(evalArgs, "--depth", "100000"), exitUsage, "--depth 100000: want 0 (the default for the drafter and --mode) or 1 to 64"},
		{with(evalArgs, "--depth", "64"), exitOK, ""},
		{with(evalArgs, "--mode", "beam"), exitUsage, "--mode beam: want chain or tree"},
		{with(evalArgs, "--max-drop", "5%"), exitUsage, "--max-drop needs --baseline"},
		{with(evalArgs, "--baseline", "b.json"), exitUsage, "--baseline needs --max-drop"},
		{with(evalArgs, "--allow-baseline-mismatch"), exitUsage, "--allow-baseline-mismatch applies to --baseline"},
		{with(evalArgs, "--baseline", "b.json", "--max-drop", "x"), exitUsage, `--max-drop "x": want a non-negative number`},
		{with(evalArgs, "--baseline", "b.json", "--max-drop", "NaN"), exitUsage, `--max-drop "NaN"`},
		{with(evalArgs, "--baseline", "b.json", "--max-drop", "150%"), exitUsage, "want a percentage between 0% and 100%"},
		{with(evalArgs, "--baseline", "b.json", "--max-drop", "-1"), exitUsage, `--max-drop "-1"`},
		{with(evalArgs, "--baseline", "b.json", "--max-drop", "5%", "--allow-baseline-mismatch"), exitOK, ""},
		{with(evalArgs, "--schedule", "adaptive"), exitUsage, `--schedule "adaptive": want fixed, threshold or sps`},
		{with(evalArgs, "--confidence-threshold", "0.3"), exitUsage, "--confidence-threshold applies to --schedule threshold"},
		{with(evalArgs, "--schedule", "threshold", "--confidence-threshold", "1"), exitUsage, "--confidence-threshold 1: want a number in (0, 1)"},
		{with(evalArgs, "--schedule", "threshold", "--confidence-threshold", "NaN"), exitUsage, "want a finite number"},
		{with(evalArgs, "--schedule", "threshold", "--confidence-threshold", "0.3"), exitOK, ""},
		{with(evalArgs, "--round-cost", "1,1.1"), exitUsage, "--round-cost applies to --schedule sps"},
		{with(evalArgs, "--schedule", "sps", "--round-cost", "1,x"), exitUsage, `--round-cost "1,x": value 2 ("x") is not a positive number`},
		{with(evalArgs, "--schedule", "sps", "--round-cost", "1,0"), exitUsage, "value 2"},
		{with(evalArgs, "--schedule", "sps", "--round-cost", "1, 1.05,1.2"), exitOK, ""},
		{with(evalArgs, "--schedule", "sps"), exitOK, ""},
		{with(evalArgs, "--typical", "0.09"), exitUsage, `--typical "0.09": want EPS,ALPHA`},
		{with(evalArgs, "--typical", "NaN,0.3"), exitUsage, "want two finite numbers"},
		{with(evalArgs, "--typical", "2,0.3"), exitUsage, "want EPS in [0, 1] and ALPHA >= 0"},
		{with(evalArgs, "--tree", "[[0,0]]"), exitUsage, "--tree:"},
		{with(evalArgs, "--tree", "no-such-file.json"), exitUsage, "--tree: open no-such-file.json"},
	}
	for _, c := range cases {
		r := runCLI(t, func(any) error { return nil }, c.args...)
		if r.code != c.code || !strings.Contains(r.msg, c.want) {
			t.Errorf("drafter %s: exit %d (%s); want %d and a message with %q", strings.Join(c.args, " "), r.code, r.msg, c.code, c.want)
		}
	}
}

// TestFloatFlagsAreFinite: every float flag of every command refuses NaN and
// infinities when parsed (floatValue), so no command can forget it.
func TestFloatFlagsAreFinite(t *testing.T) {
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.HasPrefix(f.Value.Type(), "float") {
				n++
				if _, ok := f.Value.(*floatValue); !ok {
					t.Errorf("%s --%s is a %s flag that accepts NaN; define it with floatVar", c.CommandPath(), f.Name, f.Value.Type())
				}
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd(nil))
	if n == 0 {
		t.Fatal("no float flags found")
	}
}
