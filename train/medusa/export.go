package medusa

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// Export layouts, each a folder loadable as is:
//
//	vllm/config.json, vllm/model.safetensors      vLLM's "medusa" model type
//	medusa/config.json, medusa/medusa_lm_head.safetensors
//	                                              FasterDecoding/Medusa, which
//	                                              TensorRT-LLM's converter reads
//	drafter.json                                  provenance and final metrics
//
// vLLM: keys blocks.{h}.layers.{l}.weight [H,H] and .bias [H] (with
// "medusa_fc_bias": true; vLLM's default is no bias) and lm_heads.{h}.weight
// [V,H]. With SharedLMHead the config sets "original_lm_head": true, which makes
// vLLM build ONE lm_head for all heads from lm_heads.0.weight, so only that key
// (the target's lm_head) is written.
//
// FasterDecoding: keys {h}.{l}.linear.weight, {h}.{l}.linear.bias and
// {h}.{layers}.weight (the head's lm_head). That format has no shared head, so
// with SharedLMHead every head gets a copy of the target's lm_head. TensorRT-LLM's
// converter reads it one block per layer; FasterDecoding/Medusa's own
// MedusaModel builds [ResBlock] * num_layers, one block applied num_layers
// times: with more than one layer it loads every layer's keys into that one
// block (the last wins), so heads of several distinct blocks (the default,
// see DefaultConfig) are not reproduced there.
const (
	VLLMDir        = "vllm"
	MedusaDir      = "medusa"
	VLLMWeights    = "model.safetensors"
	MedusaWeights  = "medusa_lm_head.safetensors"
	ConfigFile     = "config.json"
	ProvenanceFile = "drafter.json"
)

// ExportInfo is the provenance written to drafter.json and the export options.
type ExportInfo struct {
	// BaseModel is base_model_name_or_path in the FasterDecoding config: the
	// target's Hub id or path.
	BaseModel string
	// TargetFingerprint identifies the exact target weights (checkpoint.Fingerprint).
	TargetFingerprint string
	// DataManifests maps each training data manifest to its hash.
	DataManifests map[string]string
	// Args are the training arguments; Metrics the final held-out evaluation.
	Args    any
	Metrics *Metrics
	// DType of the exported weights: F32 (default), BF16 or F16.
	DType safetensors.DType
}

type provenance struct {
	Method            string            `json:"method"`
	Format            []string          `json:"formats"`
	Heads             int               `json:"num_heads"`
	Layers            int               `json:"num_layers"`
	Hidden            int               `json:"hidden_size"`
	Vocab             int               `json:"vocab_size"`
	SharedLMHead      bool              `json:"shared_lm_head"`
	DType             safetensors.DType `json:"dtype"`
	BaseModel         string            `json:"base_model_name_or_path,omitempty"`
	TargetFingerprint string            `json:"target_fingerprint"`
	DataManifests     map[string]string `json:"data_manifests"`
	Args              any               `json:"args"`
	Metrics           *Metrics          `json:"metrics,omitempty"`
}

// Export writes the heads into dir in both layouts plus drafter.json. Every
// file is written atomically.
func Export(dir string, m *Heads, info ExportInfo) error {
	dt := info.DType
	if dt == "" {
		dt = safetensors.F32
	}
	if !dt.IsFloat() {
		return fmt.Errorf("medusa: export dtype must be F32, BF16 or F16, got %q", dt)
	}
	for _, sub := range []string{VLLMDir, MedusaDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return fmt.Errorf("medusa: export: %w", err)
		}
	}
	H, V := m.Hidden, m.Vocab
	tensor := func(name string, shape []int, data []float32) safetensors.Tensor {
		t, err := safetensors.FloatTensor(name, dt, shape, data)
		if err != nil { // dt was checked above
			panic(err)
		}
		return t
	}

	// vLLM layout.
	var vt []safetensors.Tensor
	for h := 0; h < m.Heads; h++ {
		for l := 0; l < m.Layers; l++ {
			vt = append(vt,
				tensor(fmt.Sprintf("blocks.%d.layers.%d.weight", h, l), []int{H, H}, m.W[h][l]),
				tensor(fmt.Sprintf("blocks.%d.layers.%d.bias", h, l), []int{H}, m.B[h][l]))
		}
		if !m.SharedLMHead || h == 0 {
			vt = append(vt, tensor(fmt.Sprintf("lm_heads.%d.weight", h), []int{V, H}, m.LMHead[h]))
		}
	}
	vcfg := map[string]any{
		"model_type":           "medusa",
		"architectures":        []string{"MedusaModel"},
		"hidden_size":          H,
		"vocab_size":           V,
		"truncated_vocab_size": V,
		"num_heads":            m.Heads,
		"num_hidden_layers":    m.Layers,
		"medusa_fc_bias":       true,
		"original_lm_head":     m.SharedLMHead,
		"torch_dtype":          torchDType(dt),
	}
	if err := safetensors.WriteFile(filepath.Join(dir, VLLMDir, VLLMWeights), vt, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("medusa: export: %w", err)
	}
	if err := atomicfile.WriteJSON(filepath.Join(dir, VLLMDir, ConfigFile), vcfg); err != nil {
		return err
	}

	// FasterDecoding layout.
	var ft []safetensors.Tensor
	for h := 0; h < m.Heads; h++ {
		for l := 0; l < m.Layers; l++ {
			ft = append(ft,
				tensor(fmt.Sprintf("%d.%d.linear.weight", h, l), []int{H, H}, m.W[h][l]),
				tensor(fmt.Sprintf("%d.%d.linear.bias", h, l), []int{H}, m.B[h][l]))
		}
		ft = append(ft, tensor(fmt.Sprintf("%d.%d.weight", h, m.Layers), []int{V, H}, m.LMHead[h]))
	}
	fcfg := map[string]any{
		"medusa_num_heads":        m.Heads,
		"medusa_num_layers":       m.Layers,
		"base_model_name_or_path": info.BaseModel,
		"hidden_size":             H,
		"vocab_size":              V,
	}
	if err := safetensors.WriteFile(filepath.Join(dir, MedusaDir, MedusaWeights), ft, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("medusa: export: %w", err)
	}
	if err := atomicfile.WriteJSON(filepath.Join(dir, MedusaDir, ConfigFile), fcfg); err != nil {
		return err
	}

	manifests := info.DataManifests
	if manifests == nil {
		manifests = map[string]string{}
	}
	return atomicfile.WriteJSON(filepath.Join(dir, ProvenanceFile), provenance{
		Method: "medusa", Format: []string{VLLMDir, MedusaDir},
		Heads: m.Heads, Layers: m.Layers, Hidden: H, Vocab: V, SharedLMHead: m.SharedLMHead, DType: dt,
		BaseModel: info.BaseModel, TargetFingerprint: info.TargetFingerprint, DataManifests: manifests,
		Args: info.Args, Metrics: info.Metrics,
	})
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

// LoadHeads reads heads exported by Export. dir may be the export folder (the
// vllm/ layout is then preferred, medusa/ used when vllm/ is absent) or either
// layout's own folder, detected by its files: medusa_lm_head.safetensors for
// FasterDecoding, config.json with model_type "medusa" and model.safetensors for
// vLLM.
func LoadHeads(dir string) (*Heads, error) {
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	switch {
	case exists(filepath.Join(dir, VLLMDir, VLLMWeights)):
		return loadVLLM(filepath.Join(dir, VLLMDir))
	case exists(filepath.Join(dir, MedusaDir, MedusaWeights)):
		return loadFasterDecoding(filepath.Join(dir, MedusaDir))
	case exists(filepath.Join(dir, MedusaWeights)):
		return loadFasterDecoding(dir)
	case exists(filepath.Join(dir, VLLMWeights)) && exists(filepath.Join(dir, ConfigFile)):
		return loadVLLM(dir)
	}
	return nil, fmt.Errorf("medusa: %s holds no Medusa heads (looked for %s/%s, %s/%s, %s, or %s with %s)",
		dir, VLLMDir, VLLMWeights, MedusaDir, MedusaWeights, MedusaWeights, VLLMWeights, ConfigFile)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("medusa: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("medusa: parsing %s: %w", path, err)
	}
	return nil
}

// loadInto reads tensor name of the given shape from set into dst.
func loadInto(set *safetensors.Set, file, name string, shape []int, dst []float32) error {
	info, ok := set.Info(name)
	if !ok {
		return fmt.Errorf("medusa: %s has no tensor %q", file, name)
	}
	if !equalShape(info.Shape, shape) {
		return fmt.Errorf("medusa: %s: tensor %q has shape %s, want %s", file, name, safetensors.ShapeString(info.Shape), safetensors.ShapeString(shape))
	}
	if err := set.Float32Into(name, dst); err != nil {
		return fmt.Errorf("medusa: %s: %w", file, err)
	}
	return nil
}

func equalShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func loadVLLM(dir string) (*Heads, error) {
	var cfg struct {
		ModelType    string `json:"model_type"`
		Hidden       int    `json:"hidden_size"`
		Vocab        int    `json:"vocab_size"`
		Truncated    *int   `json:"truncated_vocab_size"`
		Heads        int    `json:"num_heads"`
		Layers       int    `json:"num_hidden_layers"`
		Bias         bool   `json:"medusa_fc_bias"`
		OriginalHead bool   `json:"original_lm_head"`
	}
	cfgPath := filepath.Join(dir, ConfigFile)
	if err := readJSON(cfgPath, &cfg); err != nil {
		return nil, err
	}
	if cfg.ModelType != "medusa" {
		return nil, fmt.Errorf("medusa: %s has model_type %q, want \"medusa\"", cfgPath, cfg.ModelType)
	}
	if cfg.Truncated != nil && *cfg.Truncated != cfg.Vocab {
		return nil, fmt.Errorf("medusa: %s uses a truncated vocabulary (%d of %d), which drafter does not support", cfgPath, *cfg.Truncated, cfg.Vocab)
	}
	g := Geometry{Hidden: cfg.Hidden, Vocab: cfg.Vocab, Heads: cfg.Heads, Layers: cfg.Layers, SharedLMHead: cfg.OriginalHead}
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
		if err := loadInto(set, file, "lm_heads.0.weight", []int{g.Vocab, g.Hidden}, shared); err != nil {
			return nil, err
		}
	}
	m := newHeads(g, false, shared)
	H := g.Hidden
	for h := 0; h < g.Heads; h++ {
		for l := 0; l < g.Layers; l++ {
			if err := loadInto(set, file, fmt.Sprintf("blocks.%d.layers.%d.weight", h, l), []int{H, H}, m.W[h][l]); err != nil {
				return nil, err
			}
			if cfg.Bias {
				if err := loadInto(set, file, fmt.Sprintf("blocks.%d.layers.%d.bias", h, l), []int{H}, m.B[h][l]); err != nil {
					return nil, err
				}
			}
		}
		if !g.SharedLMHead {
			if err := loadInto(set, file, fmt.Sprintf("lm_heads.%d.weight", h), []int{g.Vocab, H}, m.LMHead[h]); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func loadFasterDecoding(dir string) (*Heads, error) {
	var cfg struct {
		Heads  *int `json:"medusa_num_heads"`
		Layers *int `json:"medusa_num_layers"`
	}
	cfgPath := filepath.Join(dir, ConfigFile)
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
	info, ok := set.Info(fmt.Sprintf("0.%d.weight", *cfg.Layers))
	if !ok || len(info.Shape) != 2 {
		return nil, errors.New("medusa: " + file + ": no 2-D lm_head tensor \"" + fmt.Sprintf("0.%d.weight", *cfg.Layers) + "\"")
	}
	g := Geometry{Hidden: info.Shape[1], Vocab: info.Shape[0], Heads: *cfg.Heads, Layers: *cfg.Layers}
	if err := g.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	m := newHeads(g, false, nil)
	H := g.Hidden
	for h := 0; h < g.Heads; h++ {
		for l := 0; l < g.Layers; l++ {
			if err := loadInto(set, file, fmt.Sprintf("%d.%d.linear.weight", h, l), []int{H, H}, m.W[h][l]); err != nil {
				return nil, err
			}
			if err := loadInto(set, file, fmt.Sprintf("%d.%d.linear.bias", h, l), []int{H}, m.B[h][l]); err != nil {
				return nil, err
			}
		}
		if err := loadInto(set, file, fmt.Sprintf("%d.%d.weight", h, g.Layers), []int{g.Vocab, H}, m.LMHead[h]); err != nil {
			return nil, err
		}
	}
	return m, nil
}
