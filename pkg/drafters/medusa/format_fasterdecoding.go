package medusa

import (
	"fmt"
	"path/filepath"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// FasterDecoding/Medusa's layout, which TensorRT-LLM's converter reads:
// config.json and medusa_lm_head.safetensors with keys {h}.{l}.linear.weight,
// {h}.{l}.linear.bias and {h}.{layers}.weight (the head's lm_head). That
// format has no shared head, so with SharedLMHead every head gets a copy of
// the target's lm_head. TensorRT-LLM's converter reads it one block per
// layer; FasterDecoding/Medusa's own MedusaModel builds [ResBlock] *
// num_layers, one block applied num_layers times: with more than one layer
// it loads every layer's keys into that one block (the last wins), so heads
// of several distinct blocks (train/medusa's default) are not reproduced
// there.
const (
	// MedusaDir is the layout's name (in eval's reports, drafter.json) and
	// its subfolder of an export.
	MedusaDir = "medusa"
	// MedusaWeights is its weights file.
	MedusaWeights = "medusa_lm_head.safetensors"
)

// fasterDecoding is FasterDecoding's layout.
type fasterDecoding struct{}

func (fasterDecoding) name() string { return MedusaDir }

func (fasterDecoding) weights() string { return MedusaWeights }

// tensors lists the heads under the layout's names: every head's own
// lm_head, the target's copied where they share it.
func (fasterDecoding) tensors(m *Heads, tensor tensorFunc) []safetensors.Tensor {
	return exportTensors(m, tensor, "%d.%d.linear.weight", "%d.%d.linear.bias", func(h int) string {
		return fmt.Sprintf("%d.%d.weight", h, m.Layers)
	})
}

// write writes the layout into dir: the tensors ft that tensors listed, and
// the config, which names the target (info.BaseModel).
func (fasterDecoding) write(dir string, m *Heads, ft []safetensors.Tensor, _ safetensors.DType, info ExportInfo) error {
	H, V := m.Hidden, m.Vocab
	fcfg := map[string]any{
		"medusa_num_heads":        m.Heads,
		"medusa_num_layers":       m.Layers,
		"base_model_name_or_path": info.BaseModel,
		"hidden_size":             H,
		"vocab_size":              V,
	}
	if err := safetensors.WriteFile(filepath.Join(dir, MedusaWeights), ft, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("medusa: export: %w", err)
	}
	return atomicfile.WriteJSON(filepath.Join(dir, drafters.ConfigFile), fcfg)
}

// detect reports whether dir holds the layout: its weights file.
func (fasterDecoding) detect(dir string) (bool, error) {
	return drafters.FileExists(filepath.Join(dir, MedusaWeights)), nil
}

// fdConfig is the part of FasterDecoding's Medusa config.json that decides
// the tensors; hidden_size and vocab_size, which Export writes, are optional.
type fdConfig struct {
	Heads  *int `json:"medusa_num_heads"`
	Layers *int `json:"medusa_num_layers"`
	Hidden *int `json:"hidden_size"`
	Vocab  *int `json:"vocab_size"`
}

// unused explains why the config has no use for tensor name.
func (c *fdConfig) unused(name string) string {
	H, L := *c.Heads, *c.Layers
	for _, p := range []string{"#.#.linear.weight", "#.#.linear.bias"} {
		if ix := safetensors.NameIndices(name, p); ix != nil {
			if ix[0] >= H {
				return span("medusa_num_heads", H, "heads", "")
			}
			return span("medusa_num_layers", L, "blocks", " in each head")
		}
	}
	if ix := safetensors.NameIndices(name, "#.#.weight"); ix != nil {
		if ix[0] >= H {
			return span("medusa_num_heads", H, "heads", "")
		}
		return fmt.Sprintf("medusa_num_layers is %d, so head %d's lm_head is %d.%d.weight; %s is the lm_head of a head with %d blocks",
			L, ix[0], ix[0], L, name, ix[1])
	}
	return "it is not a tensor of FasterDecoding's Medusa layout ({h}.{l}.linear.weight and .bias, {h}.{num_layers}.weight)"
}

// load reads the heads in dir.
func (fasterDecoding) load(dir string) (*Loaded, error) {
	var cfg fdConfig
	cfgPath := filepath.Join(dir, drafters.ConfigFile)
	if err := readJSON(cfgPath, &cfg); err != nil {
		return nil, err
	}
	if cfg.Heads == nil || cfg.Layers == nil {
		return nil, fmt.Errorf("medusa: %s lacks medusa_num_heads or medusa_num_layers", cfgPath)
	}
	file := filepath.Join(dir, MedusaWeights)
	set, err := safetensors.Open(file)
	if err != nil {
		return nil, fmt.Errorf("medusa: %w", err)
	}
	defer set.Close()
	// The config gives no sizes: they come from the lm_heads [V, H]. The
	// first one found decides; the exact check below refuses the rest when
	// they differ or sit where the config puts none.
	var info safetensors.Info
	for _, name := range set.Names() {
		if safetensors.NameIndices(name, "#.#.weight") != nil {
			info, _ = set.Info(name)
			break
		}
	}
	if len(info.Shape) != 2 {
		return nil, fmt.Errorf("medusa: %s holds no 2-D lm_head tensor ({h}.{medusa_num_layers}.weight)", file)
	}
	lmName := info.Name
	g := Geometry{Hidden: info.Shape[1], Vocab: info.Shape[0], Heads: *cfg.Heads, Layers: *cfg.Layers}
	if err := g.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	for _, f := range []struct {
		name      string
		cfg       *int
		got, axis int
	}{{"hidden_size", cfg.Hidden, g.Hidden, 1}, {"vocab_size", cfg.Vocab, g.Vocab, 0}} {
		if f.cfg != nil && *f.cfg != f.got {
			return nil, fmt.Errorf("medusa: %s says %s %d, but the lm_head %q in %s is %s (dimension %d is %d)",
				cfgPath, f.name, *f.cfg, lmName, file, safetensors.ShapeString(info.Shape), f.axis, f.got)
		}
	}
	m := newHeads(g, false, nil)
	H := g.Hidden
	var wants []tensorWant
	for h := range g.Heads {
		for l := range g.Layers {
			wants = append(wants,
				tensorWant{fmt.Sprintf("%d.%d.linear.weight", h, l), []int{H, H}, m.W[h][l]},
				tensorWant{fmt.Sprintf("%d.%d.linear.bias", h, l), []int{H}, m.B[h][l]})
		}
		wants = append(wants, tensorWant{fmt.Sprintf("%d.%d.weight", h, g.Layers), []int{g.Vocab, H}, m.LMHead[h]})
	}
	desc := fmt.Sprintf("medusa_num_heads %d, medusa_num_layers %d", g.Heads, g.Layers)
	dt, err := readExact(set, file, cfgPath, desc, wants, cfg.unused)
	if err != nil {
		return nil, err
	}
	return &Loaded{Heads: m, Layout: MedusaDir, Config: cfgPath, Weights: file, DType: dt}, nil
}
