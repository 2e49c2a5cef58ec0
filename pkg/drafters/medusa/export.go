package medusa

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
// file is written atomically. Heads with a NaN or infinite weight (also one
// that the export dtype cannot hold) are refused before anything is written.
func Export(dir string, m *Heads, info ExportInfo) error {
	dt := info.DType
	if dt == "" {
		dt = safetensors.F32
	}
	if !dt.IsFloat() {
		return fmt.Errorf("medusa: export dtype must be F32, BF16 or F16, got %q", dt)
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
	// Every value of both layouts is in vt, converted to dt as they are.
	if err := safetensors.CheckAllFinite(vt); err != nil {
		hint := "training diverged or resumed from a damaged checkpoint"
		if dt == safetensors.F16 {
			hint += ", or a weight exceeds F16's range (65504): export as BF16 or F32"
		}
		return fmt.Errorf("medusa: refusing to export heads with non-finite weights into %s (nothing written): %w; %s", dir, err, hint)
	}
	for _, sub := range []string{VLLMDir, MedusaDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return fmt.Errorf("medusa: export: %w", err)
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

// Loaded is a Medusa export read back by Load.
type Loaded struct {
	// Heads are the heads the export holds.
	Heads *Heads
	// Layout is the layout read, VLLMDir or MedusaDir; Config and Weights are
	// its config.json and weights file.
	Layout, Config, Weights string
	// DType is the weights' element type, "" when the tensors mix types.
	DType safetensors.DType
}

// LoadHeads reads the heads of an export; see Load.
func LoadHeads(dir string) (*Heads, error) {
	l, err := Load(dir)
	if err != nil {
		return nil, err
	}
	return l.Heads, nil
}

// Load reads heads exported by Export (or by another tool in either layout).
// dir may be the export folder (the vllm/ layout is then preferred, medusa/
// used when vllm/ is absent) or either layout's own folder, detected by its
// files: medusa_lm_head.safetensors for FasterDecoding, config.json with
// model_type "medusa" and model.safetensors for vLLM.
//
// The config and the weights must agree exactly, since an engine builds the
// heads from the config and ignores what it does not ask for: every tensor the
// config implies must be present with its shape and a float type, every
// tensor of the file must be one the config implies (a fifth head's weights
// under a config of four heads is an error naming the tensor and the config
// field), and every value must be finite.
func Load(dir string) (*Loaded, error) {
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

// tensorWant is one tensor a config implies and where its values go.
type tensorWant struct {
	name  string
	shape []int
	dst   []float32
}

// readExact reads wants from set (opened from file) into their buffers after
// checking that the file holds exactly those tensors; cfgPath and cfgDesc
// (the config fields that decide the set) name the config in errors, and
// unused explains why the config has no use for a tensor. It returns the
// tensors' element type, "" when they mix types.
func readExact(set *safetensors.Set, file, cfgPath, cfgDesc string, wants []tensorWant, unused func(name string) string) (safetensors.DType, error) {
	need := make(map[string]bool, len(wants))
	for _, w := range wants {
		need[w.name] = true
	}
	for _, name := range set.Names() {
		if !need[name] {
			return "", fmt.Errorf("medusa: %s holds tensor %q, which %s does not use: %s", file, name, cfgPath, unused(name))
		}
	}
	var dt safetensors.DType
	for i, w := range wants {
		info, ok := set.Info(w.name)
		if !ok {
			return "", fmt.Errorf("medusa: %s has no tensor %q, which %s implies (%s)", file, w.name, cfgPath, cfgDesc)
		}
		if i == 0 {
			dt = info.DType
		} else if info.DType != dt {
			dt = ""
		}
		if err := set.ReadFinite(w.name, w.shape, w.dst); err != nil {
			return "", fmt.Errorf("medusa: %w", err)
		}
	}
	return dt, nil
}

// indices matches name against pattern, whose "#" parts stand for decimal
// numbers ("blocks.#.layers.#.weight"), and returns those numbers, or nil when
// name does not match.
func indices(name, pattern string) []int {
	np, pp := strings.Split(name, "."), strings.Split(pattern, ".")
	if len(np) != len(pp) {
		return nil
	}
	var out []int
	for i, p := range pp {
		if p != "#" {
			if np[i] != p {
				return nil
			}
			continue
		}
		n, err := strconv.Atoi(np[i])
		if err != nil || n < 0 || strconv.Itoa(n) != np[i] {
			return nil
		}
		out = append(out, n)
	}
	return out
}

// span says what a count field allows: "num_heads is 4: heads 0 to 3".
func span(field string, n int, noun, scope string) string {
	if n == 0 {
		return fmt.Sprintf("%s is 0: no %s%s", field, noun, scope)
	}
	return fmt.Sprintf("%s is %d: %s 0 to %d%s", field, n, noun, n-1, scope)
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
		if ix := indices(name, p); ix != nil {
			switch {
			case ix[0] >= *c.Heads:
				return span("num_heads", *c.Heads, "heads", "")
			case ix[1] >= *c.Layers:
				return span("num_hidden_layers", *c.Layers, "blocks", " in each head")
			}
			return "medusa_fc_bias is false (blocks without bias, as vLLM builds them by default)"
		}
	}
	if ix := indices(name, "lm_heads.#.weight"); ix != nil {
		if ix[0] >= *c.Heads {
			return span("num_heads", *c.Heads, "heads", "")
		}
		return "original_lm_head is true (one lm_head, lm_heads.0.weight, for every head)"
	}
	return "it is not a tensor of vLLM's Medusa layout (blocks.{h}.layers.{l}.weight and .bias, lm_heads.{h}.weight)"
}

func loadVLLM(dir string) (*Loaded, error) {
	var cfg vllmConfig
	cfgPath := filepath.Join(dir, ConfigFile)
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
		if ix := indices(name, p); ix != nil {
			if ix[0] >= H {
				return span("medusa_num_heads", H, "heads", "")
			}
			return span("medusa_num_layers", L, "blocks", " in each head")
		}
	}
	if ix := indices(name, "#.#.weight"); ix != nil {
		if ix[0] >= H {
			return span("medusa_num_heads", H, "heads", "")
		}
		return fmt.Sprintf("medusa_num_layers is %d, so head %d's lm_head is %d.%d.weight; %s is the lm_head of a head with %d blocks",
			L, ix[0], ix[0], L, name, ix[1])
	}
	return "it is not a tensor of FasterDecoding's Medusa layout ({h}.{l}.linear.weight and .bias, {h}.{num_layers}.weight)"
}

func loadFasterDecoding(dir string) (*Loaded, error) {
	var cfg fdConfig
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
	// The config gives no sizes: they come from the lm_heads [V, H]. The
	// first one found decides; the exact check below refuses the rest when
	// they differ or sit where the config puts none.
	var info safetensors.Info
	for _, name := range set.Names() {
		if indices(name, "#.#.weight") != nil {
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
