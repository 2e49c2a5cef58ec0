package medusa

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// The layouts Export writes, each a folder loadable as is:
//
//	vllm/config.json, vllm/model.safetensors      vLLM's "medusa" model type (format_vllm.go)
//	medusa/config.json, medusa/medusa_lm_head.safetensors
//	                                              FasterDecoding/Medusa, which
//	                                              TensorRT-LLM's converter reads
//	                                              (format_fasterdecoding.go)
//	drafter.json                                  provenance and final metrics
//	SHA256SUMS                                    every file above's SHA-256, written last

// ExportInfo is the provenance written to drafter.json and the export options.
type ExportInfo struct {
	// BaseModel is base_model_name_or_path in the FasterDecoding config: the
	// target's Hub id or path.
	BaseModel string
	// TargetFingerprint identifies the exact target weights (checkpoint.Fingerprint).
	TargetFingerprint string
	// DataManifests maps each training data manifest to its hash.
	DataManifests map[string]string
	// Args are the training arguments; Metrics the final held-out evaluation
	// (train/medusa.Metrics), both recorded as JSON.
	Args    any
	Metrics any
	// DType of the exported weights: F32 (default), BF16 or F16.
	DType safetensors.DType
	// Tree is the heads' calibrated static tree (spec.CalibratedChoices),
	// written to drafter.json as "tree": eval's default tree for these
	// heads, and the medusa_choices to give an engine. Nil writes none.
	Tree spec.Choices
	// Loss is the loss the heads trained with (train/lkloss's canonical
	// spelling; empty: not recorded), LKEta lk_hybrid's η where it weighs.
	Loss  string
	LKEta float64
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
	Loss              string            `json:"loss,omitempty"`
	LKEta             float64           `json:"lk_eta,omitempty"`
	Metrics           any               `json:"metrics,omitempty"`
	Tree              spec.Choices      `json:"tree,omitempty"`
}

// Export writes the heads into dir in both layouts plus drafter.json, and
// last SHA256SUMS over all of them (drafters.SumsFile; an earlier one is
// deleted first). Every file is written atomically. Heads with a NaN or infinite weight (also one
// that the export dtype cannot hold) are refused before anything is written.
func Export(dir string, m *Heads, info ExportInfo) error {
	dt := info.DType
	if dt == "" {
		dt = safetensors.F32
	}
	if !dt.IsFloat() {
		return fmt.Errorf("medusa: export dtype must be F32, BF16 or F16, got %q", dt)
	}
	tensor := func(name string, shape []int, data []float32) safetensors.Tensor {
		t, err := safetensors.FloatTensor(name, dt, shape, data)
		if err != nil { // dt was checked above
			panic(err)
		}
		return t
	}
	fs := formats()
	ts := make([][]safetensors.Tensor, len(fs))
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name()
		// The layouts hold the same values (converted to dt as they are):
		// the first one's names the first bad value.
		ts[i] = f.tensors(m, tensor)
		if err := safetensors.CheckAllFinite(ts[i]); err != nil {
			hint := "training diverged or resumed from a damaged checkpoint"
			if dt == safetensors.F16 {
				hint += ", or a weight exceeds F16's range (65504): export as BF16 or F32"
			}
			return fmt.Errorf("medusa: refusing to export heads with non-finite weights into %s (nothing written): %w; %s", dir, err, hint)
		}
	}
	for _, f := range fs {
		if err := os.MkdirAll(filepath.Join(dir, f.name()), 0o755); err != nil {
			return fmt.Errorf("medusa: export: %w", err)
		}
	}
	if err := drafters.RemoveSums(dir); err != nil {
		return err
	}
	files := []string{drafters.ProvenanceFile}
	for i, f := range fs {
		if err := f.write(filepath.Join(dir, f.name()), m, ts[i], dt, info); err != nil {
			return err
		}
		files = append(files, f.name()+"/"+drafters.ConfigFile, f.name()+"/"+f.weights())
	}
	manifests := info.DataManifests
	if manifests == nil {
		manifests = map[string]string{}
	}
	err := atomicfile.WriteJSON(filepath.Join(dir, drafters.ProvenanceFile), provenance{
		Method: string(Kind), Format: names,
		Heads: m.Heads, Layers: m.Layers, Hidden: m.Hidden, Vocab: m.Vocab, SharedLMHead: m.SharedLMHead, DType: dt,
		BaseModel: info.BaseModel, TargetFingerprint: info.TargetFingerprint, DataManifests: manifests,
		Args: info.Args, Loss: info.Loss, LKEta: info.LKEta, Metrics: nilIfNilPointer(info.Metrics), Tree: info.Tree,
	})
	if err != nil {
		return err
	}
	// Last: the sums vouch for the files as they now are.
	return drafters.WriteSums(dir, files)
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

// Load reads heads exported by Export (or by another tool in any layout).
// dir may be the export folder (the layouts' subfolders are tried in the
// order formats lists them: vllm/ first) or one layout's own folder,
// detected by its files: medusa_lm_head.safetensors for FasterDecoding,
// config.json with model_type "medusa" and model.safetensors for vLLM.
//
// The config and the weights must agree exactly, since an engine builds the
// heads from the config and ignores what it does not ask for: every tensor the
// config implies must be present with its shape and a float type, every
// tensor of the file must be one the config implies (a fifth head's weights
// under a config of four heads is an error naming the tensor and the config
// field), and every value must be finite.
func Load(dir string) (*Loaded, error) {
	for _, f := range formats() {
		sub := filepath.Join(dir, f.name())
		if ok, _ := f.detect(sub); ok {
			return f.load(sub)
		}
	}
	f, err := detectFormat(dir)
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, fmt.Errorf("medusa: %s holds no Medusa heads (looked for %s/%s, %s/%s, %s, or %s with %s)",
			dir, VLLMDir, VLLMWeights, MedusaDir, MedusaWeights, MedusaWeights, VLLMWeights, drafters.ConfigFile)
	}
	return f.load(dir)
}

// exportTensors lists the heads head by head, each head's blocks (weight
// and bias, named by the patterns of head and block index) and then its
// lm_head, named by lmHead ("" leaves it out).
func exportTensors(m *Heads, tensor tensorFunc, weight, bias string, lmHead func(h int) string) []safetensors.Tensor {
	H, V := m.Hidden, m.Vocab
	var ts []safetensors.Tensor
	for h := 0; h < m.Heads; h++ {
		for l := 0; l < m.Layers; l++ {
			ts = append(ts,
				tensor(fmt.Sprintf(weight, h, l), []int{H, H}, m.W[h][l]),
				tensor(fmt.Sprintf(bias, h, l), []int{H}, m.B[h][l]))
		}
		if name := lmHead(h); name != "" {
			ts = append(ts, tensor(name, []int{V, H}, m.LMHead[h]))
		}
	}
	return ts
}

// tensorFunc makes a tensor of the export's dtype.
type tensorFunc func(name string, shape []int, data []float32) safetensors.Tensor

// format is one export layout of the heads: a format_*.go file holds its
// writer, detector and loader.
type format interface {
	// name is the layout's name (eval's reports, drafter.json) and its
	// subfolder of an export.
	name() string
	// weights is the layout's weights file in its folder.
	weights() string
	// tensors lists the heads as the layout stores them.
	tensors(m *Heads, tensor tensorFunc) []safetensors.Tensor
	// write writes the layout's files into dir: the tensors ts and its
	// config.
	write(dir string, m *Heads, ts []safetensors.Tensor, dt safetensors.DType, info ExportInfo) error
	// detect reports whether dir holds the layout; an error when it holds a
	// broken one.
	detect(dir string) (bool, error)
	// load reads the heads of the layout in dir.
	load(dir string) (*Loaded, error)
}

// formats lists the layouts Export writes, in the order of preference
// (Method.Layouts): both carry the same weights, only vLLM's records a shared
// lm_head.
func formats() []format { return []format{vllm{}, fasterDecoding{}} }

// detectFormat returns the layout held directly in dir, nil when none. A
// folder holding two layouts' files is refused: one folder holds one export
// (their configs would be one config.json).
func detectFormat(dir string) (format, error) {
	var found format
	for _, f := range formats() {
		ok, err := f.detect(dir)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("%s holds Medusa heads in two layouts, %s and %s; keep one export per folder", dir, found.name(), f.name())
		}
		found = f
	}
	return found, nil
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

// span says what a count field allows: "num_heads is 4: heads 0 to 3".
func span(field string, n int, noun, scope string) string {
	if n == 0 {
		return fmt.Sprintf("%s is 0: no %s%s", field, noun, scope)
	}
	return fmt.Sprintf("%s is %d: %s 0 to %d%s", field, n, noun, n-1, scope)
}

// nilIfNilPointer returns nil for a nil pointer held in v (a *Metrics of a
// run that held nothing out), so that drafter.json omits it as it omits a
// nil interface.
func nilIfNilPointer(v any) any {
	if r := reflect.ValueOf(v); r.Kind() == reflect.Pointer && r.IsNil() {
		return nil
	}
	return v
}
