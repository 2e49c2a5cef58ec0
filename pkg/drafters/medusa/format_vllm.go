package medusa

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// vLLM's "medusa" model type: config.json and model.safetensors with keys
// blocks.{h}.layers.{l}.weight [H,H] and .bias [H] (with "medusa_fc_bias":
// true; vLLM's default is no bias) and lm_heads.{h}.weight [V,H]. With
// SharedLMHead the config sets "original_lm_head": true, which makes vLLM
// build ONE lm_head for all heads from lm_heads.0.weight, so only that key
// (the target's lm_head) is written.
const (
	// VLLMDir is the layout's name (in eval's reports, drafter.json) and its
	// subfolder of an export.
	VLLMDir = "vllm"
	// VLLMWeights is its weights file.
	VLLMWeights = "model.safetensors"
)

// vllm is the vLLM layout.
type vllm struct{}

func (vllm) name() string { return VLLMDir }

func (vllm) weights() string { return VLLMWeights }

// tensors lists the heads under the layout's names; with a shared lm_head
// only head 0's (the target's).
func (vllm) tensors(m *Heads, tensor tensorFunc) []safetensors.Tensor {
	return exportTensors(m, tensor, "blocks.%d.layers.%d.weight", "blocks.%d.layers.%d.bias", func(h int) string {
		if m.SharedLMHead && h > 0 {
			return ""
		}
		return fmt.Sprintf("lm_heads.%d.weight", h)
	})
}

// write writes the layout into dir: the tensors ts that tensors listed, and
// the config.
func (vllm) write(dir string, m *Heads, vt []safetensors.Tensor, dt safetensors.DType, _ ExportInfo) error {
	vcfg := map[string]any{
		"model_type":           "medusa",
		"architectures":        []string{"MedusaModel"},
		"hidden_size":          m.Hidden,
		"vocab_size":           m.Vocab,
		"truncated_vocab_size": m.Vocab,
		"num_heads":            m.Heads,
		"num_hidden_layers":    m.Layers,
		"medusa_fc_bias":       true,
		"original_lm_head":     m.SharedLMHead,
		"torch_dtype":          torchDType(dt),
	}
	if err := safetensors.WriteFile(filepath.Join(dir, VLLMWeights), vt, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("medusa: export: %w", err)
	}
	return atomicfile.WriteJSON(filepath.Join(dir, drafters.ConfigFile), vcfg)
}

func torchDType(d safetensors.DType) string {
	switch d {
	case safetensors.BF16:
		return "bfloat16"
	case safetensors.F16:
		return "float16"
	}
	return "float32"
}

// detect reports whether dir holds the layout: a config.json of model_type
// medusa (or architectures MedusaModel), which needs its model.safetensors
// beside it.
func (vllm) detect(dir string) (bool, error) {
	var c struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
	}
	found, err := drafters.ReadConfig(dir, &c)
	if err != nil || !found {
		return false, err
	}
	if c.ModelType != "medusa" && !slices.Contains(c.Architectures, "MedusaModel") {
		return false, nil
	}
	if !drafters.FileExists(filepath.Join(dir, VLLMWeights)) {
		return false, fmt.Errorf("%s describes vLLM Medusa heads but %s has no %s", filepath.Join(dir, drafters.ConfigFile), dir, VLLMWeights)
	}
	return true, nil
}

// vllmConfig is the part of vLLM's Medusa config.json that decides the
// tensors.
type vllmConfig struct {
	ModelType    string `json:"model_type"`
	Hidden       *int   `json:"hidden_size"`
	Vocab        *int   `json:"vocab_size"`
	Truncated    *int   `json:"truncated_vocab_size"`
	Heads        *int   `json:"num_heads"`
	Layers       *int   `json:"num_hidden_layers"`
	Bias         bool   `json:"medusa_fc_bias"`
	OriginalHead bool   `json:"original_lm_head"`
}

// unused explains why the config has no use for tensor name.
func (c *vllmConfig) unused(name string) string {
	for _, p := range []string{"blocks.#.layers.#.weight", "blocks.#.layers.#.bias"} {
		if ix := safetensors.NameIndices(name, p); ix != nil {
			switch {
			case ix[0] >= *c.Heads:
				return span("num_heads", *c.Heads, "heads", "")
			case ix[1] >= *c.Layers:
				return span("num_hidden_layers", *c.Layers, "blocks", " in each head")
			}
			return "medusa_fc_bias is false (blocks without bias, as vLLM builds them by default)"
		}
	}
	if ix := safetensors.NameIndices(name, "lm_heads.#.weight"); ix != nil {
		if ix[0] >= *c.Heads {
			return span("num_heads", *c.Heads, "heads", "")
		}
		return "original_lm_head is true (one lm_head, lm_heads.0.weight, for every head)"
	}
	return "it is not a tensor of vLLM's Medusa layout (blocks.{h}.layers.{l}.weight and .bias, lm_heads.{h}.weight)"
}

// load reads the heads in dir.
func (vllm) load(dir string) (*Loaded, error) {
	var cfg vllmConfig
	cfgPath := filepath.Join(dir, drafters.ConfigFile)
	if err := readJSON(cfgPath, &cfg); err != nil {
		return nil, err
	}
	if cfg.ModelType != "medusa" {
		return nil, fmt.Errorf("medusa: %s has model_type %q, want \"medusa\"", cfgPath, cfg.ModelType)
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"hidden_size", cfg.Hidden}, {"vocab_size", cfg.Vocab}, {"num_heads", cfg.Heads}, {"num_hidden_layers", cfg.Layers}} {
		if f.v == nil {
			return nil, fmt.Errorf("medusa: %s lacks %s (a vLLM Medusa config states hidden_size, vocab_size, num_heads and num_hidden_layers)", cfgPath, f.name)
		}
	}
	if cfg.Truncated != nil && *cfg.Truncated != *cfg.Vocab {
		return nil, fmt.Errorf("medusa: %s uses a truncated vocabulary (%d of %d), which drafter does not support", cfgPath, *cfg.Truncated, *cfg.Vocab)
	}
	g := Geometry{Hidden: *cfg.Hidden, Vocab: *cfg.Vocab, Heads: *cfg.Heads, Layers: *cfg.Layers, SharedLMHead: cfg.OriginalHead}
	if err := g.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	file := filepath.Join(dir, VLLMWeights)
	set, err := safetensors.Open(file)
	if err != nil {
		return nil, fmt.Errorf("medusa: %w", err)
	}
	defer set.Close()
	var shared []float32
	if g.SharedLMHead {
		shared = make([]float32, g.Vocab*g.Hidden)
	}
	m := newHeads(g, false, shared)
	H, V := g.Hidden, g.Vocab
	var wants []tensorWant
	if g.SharedLMHead {
		wants = append(wants, tensorWant{"lm_heads.0.weight", []int{V, H}, shared})
	}
	for h := range g.Heads {
		for l := range g.Layers {
			wants = append(wants, tensorWant{fmt.Sprintf("blocks.%d.layers.%d.weight", h, l), []int{H, H}, m.W[h][l]})
			if cfg.Bias {
				wants = append(wants, tensorWant{fmt.Sprintf("blocks.%d.layers.%d.bias", h, l), []int{H}, m.B[h][l]})
			}
		}
		if !g.SharedLMHead {
			wants = append(wants, tensorWant{fmt.Sprintf("lm_heads.%d.weight", h), []int{V, H}, m.LMHead[h]})
		}
	}
	desc := fmt.Sprintf("hidden_size %d, vocab_size %d, num_heads %d, num_hidden_layers %d, medusa_fc_bias %v, original_lm_head %v",
		H, V, g.Heads, g.Layers, cfg.Bias, cfg.OriginalHead)
	dt, err := readExact(set, file, cfgPath, desc, wants, cfg.unused)
	if err != nil {
		return nil, err
	}
	return &Loaded{Heads: m, Layout: VLLMDir, Config: cfgPath, Weights: file, DType: dt}, nil
}
