package main

import (
	"errors"

	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/pkg/generate"
)

// samplingFlags are the sampling flags generate, distill and eval share; only
// the flags the user set override generation_config.json.
type samplingFlags struct {
	temperature, topP, minP float64
	topK, maxNew            int
	seed                    uint64
}

func (f *samplingFlags) register(fs *pflag.FlagSet) {
	floatVar(fs, &f.temperature, "temperature", 0, "sampling temperature; 0 is greedy (default: generation_config.json when do_sample, else greedy)")
	floatVar(fs, &f.topP, "top-p", 0, "nucleus sampling mass in [0, 1], 0 or 1 disables (default: generation_config.json); checked even when greedy decoding ignores it")
	fs.IntVar(&f.topK, "top-k", 0, "keep the k most probable tokens, 0 disables (default: generation_config.json); checked even when greedy decoding ignores it")
	floatVar(fs, &f.minP, "min-p", 0, "drop tokens below min-p times the top probability, in [0, 1], 0 disables (default: generation_config.json); checked even when greedy decoding ignores it")
	fs.IntVar(&f.maxNew, "max-new-tokens", 0, "most tokens to generate, at least 1 and less than the model's context (default: generation_config.json max_new_tokens, else max_length, else the context)")
	fs.Uint64Var(&f.seed, "seed", 0, "random seed")
}

// checks are the sampling flags' rules. They hold whatever the temperature:
// a --top-p 2 that greedy decoding would ignore is still a mistake.
func (f *samplingFlags) checks() []flagCheck {
	return []flagCheck{
		{"temperature", f.temperature < 0, "0 (greedy) or a positive temperature"},
		{"top-p", f.topP < 0 || f.topP > 1, "a probability mass in [0, 1] (0 or 1 disables it)"},
		{"top-k", f.topK < 0, "0 (disabled) or a positive number of tokens"},
		{"min-p", f.minP < 0 || f.minP > 1, "a fraction in [0, 1] (0 disables it)"},
		{"max-new-tokens", f.maxNew < 1, "a positive number of tokens"},
	}
}

// overrides returns the flags the user set.
func (f *samplingFlags) overrides(fs *pflag.FlagSet) generate.Overrides {
	var o generate.Overrides
	if fs.Changed("temperature") {
		o.Temperature = &f.temperature
	}
	if fs.Changed("top-p") {
		o.TopP = &f.topP
	}
	if fs.Changed("top-k") {
		o.TopK = &f.topK
	}
	if fs.Changed("min-p") {
		o.MinP = &f.minP
	}
	if fs.Changed("max-new-tokens") {
		o.MaxNewTokens = &f.maxNew
	}
	return o
}

// overrideUsage turns an override the model cannot take (found once the
// model is read) into a command-line mistake.
func overrideUsage(err error) error {
	var oe *generate.OverrideError
	if errors.As(err, &oe) {
		return &usageError{err}
	}
	return err
}
