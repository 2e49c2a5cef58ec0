package checkpoint

// GenerationConfig is the parsed generation_config.json. Each sampling field has a Has
// flag saying whether the file set it, so callers can tell a default from a choice.
type GenerationConfig struct {
	// Path is the file it was read from.
	Path string
	// BOS and EOS are bos_token_id and eos_token_id (an integer or a list in the file).
	BOS, EOS []int
	// Temperature is the sampling temperature (default 1).
	Temperature float64
	// TopP is the nucleus-sampling mass (default 1).
	TopP float64
	// TopK is the top-k cutoff (default 50; 0 disables it).
	TopK int
	// DoSample selects sampling over greedy decoding (default false).
	DoSample bool
	// RepetitionPenalty is the repetition penalty (default 1, none).
	RepetitionPenalty float64
	// MaxNewTokens and MaxLength are the length limits (0 when unset).
	MaxNewTokens, MaxLength int
	// Presence flags for the fields above.
	HasBOS, HasEOS, HasTemperature, HasTopP, HasTopK, HasDoSample, HasRepetitionPenalty bool
	// Raw is the whole decoded file; numbers are json.Number.
	Raw map[string]any
}

// LoadGenerationConfig reads a generation_config.json.
func LoadGenerationConfig(path string) (*GenerationConfig, error) {
	m, err := readObject(path)
	if err != nil {
		return nil, err
	}
	f := fields{path, m}
	g := &GenerationConfig{Path: path, Raw: m}
	g.HasBOS, g.HasEOS = f.present("bos_token_id"), f.present("eos_token_id")
	g.HasTemperature, g.HasTopP, g.HasTopK = f.present("temperature"), f.present("top_p"), f.present("top_k")
	g.HasDoSample, g.HasRepetitionPenalty = f.present("do_sample"), f.present("repetition_penalty")
	if g.BOS, err = f.ids("bos_token_id"); err != nil {
		return nil, err
	}
	if g.EOS, err = f.ids("eos_token_id"); err != nil {
		return nil, err
	}
	// Defaults are those of transformers.GenerationConfig.
	if g.Temperature, err = f.float("temperature", 1); err != nil {
		return nil, err
	}
	if g.TopP, err = f.float("top_p", 1); err != nil {
		return nil, err
	}
	if g.TopK, err = f.int("top_k", 50, false); err != nil {
		return nil, err
	}
	if g.DoSample, err = f.bool("do_sample", false); err != nil {
		return nil, err
	}
	if g.RepetitionPenalty, err = f.float("repetition_penalty", 1); err != nil {
		return nil, err
	}
	if g.MaxNewTokens, err = f.int("max_new_tokens", 0, false); err != nil {
		return nil, err
	}
	if g.MaxLength, err = f.int("max_length", 0, false); err != nil {
		return nil, err
	}
	switch {
	case g.Temperature < 0:
		return nil, f.errorf("temperature", "must not be negative, got %v", g.Temperature)
	case g.TopP < 0 || g.TopP > 1:
		return nil, f.errorf("top_p", "must be in [0, 1], got %v", g.TopP)
	case g.TopK < 0:
		return nil, f.errorf("top_k", "must not be negative, got %d", g.TopK)
	case g.RepetitionPenalty <= 0:
		return nil, f.errorf("repetition_penalty", "must be positive, got %v", g.RepetitionPenalty)
	}
	return g, nil
}
