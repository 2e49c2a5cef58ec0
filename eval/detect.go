package eval

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Kind is a drafter architecture.
type Kind string

// Drafter kinds.
const (
	KindMedusa Kind = "medusa"
	KindEagle3 Kind = "eagle3"
)

// Export layouts a drafter can be found in.
const (
	LayoutMedusaVLLM   = "vllm"        // vLLM "medusa" model type: config.json + model.safetensors
	LayoutMedusaFD     = "medusa"      // FasterDecoding/Medusa (TensorRT-LLM): medusa_lm_head.safetensors
	LayoutEagleNative  = "native"      // EAGLE/SpecForge/SGLang: LlamaForCausalLMEagle3, midlayer.*
	LayoutSpeculators  = "speculators" // vLLM speculators: speculators_model_type eagle3, layers.0.*
	provenanceFileName = "drafter.json"
)

// DrafterInfo says what a --drafter folder holds.
type DrafterInfo struct {
	// Kind is the architecture and Layout the export format found.
	Kind   Kind   `json:"kind"`
	Layout string `json:"layout"`
	// Dir is the export folder the drafter is loaded from (for Medusa in the
	// vLLM or FasterDecoding layout, the folder holding that layout's files).
	Dir string `json:"dir"`
	// Provenance is the drafter.json found (in Dir, or in the train output
	// folder above it), "" when there is none.
	Provenance string `json:"provenance,omitempty"`
	// TargetFingerprint is the target checkpoint fingerprint the drafter was
	// trained against, as recorded in Provenance ("" when not recorded).
	TargetFingerprint string `json:"target_fingerprint,omitempty"`

	// prov is what Provenance records, which LoadDrafter checks the export
	// against; nil when there is none.
	prov *provenance
}

// Detect finds the drafter in dir: either one export folder (Medusa vLLM or
// FasterDecoding layout, EAGLE-3 native or speculators layout), or the train
// command's output folder holding export subfolders (vllm/, medusa/, eagle3/,
// ...). In an output folder holding both Medusa layouts the vLLM one is used
// (they carry the same weights); one holding two different kinds is an error
// that asks for the export to use. The target fingerprint is read from
// drafter.json in the export folder or, failing that, in its parent (the
// train output folder).
func Detect(dir string) (*DrafterInfo, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("eval: drafter: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("eval: drafter %s is a file; want the train output folder or one export folder inside it", dir)
	}
	info, err := classify(dir)
	if err != nil {
		return nil, err
	}
	if info == nil {
		info, err = detectInside(dir)
		if err != nil {
			return nil, err
		}
	}
	if err := readProvenance(info, dir); err != nil {
		return nil, err
	}
	return info, nil
}

// detectInside looks one level down for export folders.
func detectInside(dir string) (*DrafterInfo, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("eval: drafter: %w", err)
	}
	var found []*DrafterInfo
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := classify(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if info != nil {
			found = append(found, info)
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("eval: %s holds no drafter: looked for Medusa heads (vllm/ config.json with model_type medusa and model.safetensors, or medusa/medusa_lm_head.safetensors) and EAGLE-3 drafts (config.json with architectures LlamaForCausalLMEagle3 or speculators_model_type eagle3) in the folder and its subfolders", dir)
	}
	rank := map[string]int{LayoutMedusaVLLM: 0, LayoutMedusaFD: 1, LayoutEagleNative: 0, LayoutSpeculators: 1}
	slices.SortStableFunc(found, func(a, b *DrafterInfo) int { return rank[a.Layout] - rank[b.Layout] })
	for _, f := range found[1:] {
		if f.Kind != found[0].Kind {
			return nil, fmt.Errorf("eval: %s holds drafters of two kinds, %s in %s and %s in %s; pass the export folder to evaluate as --drafter", dir, found[0].Kind, found[0].Dir, f.Kind, f.Dir)
		}
		if f.Layout == found[0].Layout {
			return nil, fmt.Errorf("eval: %s holds two %s exports in the %s layout (%s and %s); pass the one to evaluate as --drafter", dir, f.Kind, f.Layout, found[0].Dir, f.Dir)
		}
	}
	return found[0], nil
}

// classify reports the drafter export held directly in dir, or nil.
func classify(dir string) (*DrafterInfo, error) {
	if fileExists(filepath.Join(dir, "medusa_lm_head.safetensors")) {
		return &DrafterInfo{Kind: KindMedusa, Layout: LayoutMedusaFD, Dir: dir}, nil
	}
	cfgPath := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("eval: drafter: %w", err)
	}
	var c struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
		Speculators   string   `json:"speculators_model_type"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("eval: drafter config %s: %w", cfgPath, err)
	}
	switch {
	case c.Speculators != "":
		if c.Speculators != "eagle3" {
			return nil, fmt.Errorf("eval: %s: speculators_model_type %q is not supported (want eagle3)", cfgPath, c.Speculators)
		}
		return &DrafterInfo{Kind: KindEagle3, Layout: LayoutSpeculators, Dir: dir}, nil
	case slices.Contains(c.Architectures, "LlamaForCausalLMEagle3"):
		return &DrafterInfo{Kind: KindEagle3, Layout: LayoutEagleNative, Dir: dir}, nil
	case c.ModelType == "medusa" || slices.Contains(c.Architectures, "MedusaModel"):
		if !fileExists(filepath.Join(dir, "model.safetensors")) {
			return nil, fmt.Errorf("eval: %s describes vLLM Medusa heads but %s has no model.safetensors", cfgPath, dir)
		}
		return &DrafterInfo{Kind: KindMedusa, Layout: LayoutMedusaVLLM, Dir: dir}, nil
	}
	return nil, nil
}

// readProvenance fills the provenance fields from drafter.json in the export
// folder, the folder the user named, or the export's parent, first found.
func readProvenance(info *DrafterInfo, given string) error {
	cands := []string{info.Dir, given, filepath.Dir(info.Dir)}
	for _, d := range cands {
		p := filepath.Join(d, provenanceFileName)
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("eval: drafter provenance: %w", err)
		}
		var prov provenance
		if err := json.Unmarshal(b, &prov); err != nil {
			return fmt.Errorf("eval: drafter provenance %s: %w", p, err)
		}
		info.Provenance, info.prov = p, &prov
		info.TargetFingerprint = prov.Fingerprint
		if info.TargetFingerprint == "" {
			info.TargetFingerprint = prov.LegacyFingerprint
		}
		return nil
	}
	return nil
}

// StaleError is returned by CheckFingerprint when the drafter was trained
// against a different target checkpoint.
type StaleError struct {
	DrafterDir, Provenance, DrafterFingerprint string
	ModelDir, ModelFingerprint                 string
}

// Error describes the failure.
func (e *StaleError) Error() string {
	return fmt.Sprintf("drafter %s is stale: it was trained against target fingerprint %s (recorded in %s), but model %s has fingerprint %s; retrain the drafter on this checkpoint, or pass --allow-mismatch to measure it anyway",
		e.DrafterDir, e.DrafterFingerprint, e.Provenance, e.ModelDir, e.ModelFingerprint)
}

// CheckFingerprint returns a *StaleError when the drafter records a target
// fingerprint different from modelFingerprint. A drafter that records none
// passes (there is nothing to compare).
func CheckFingerprint(info *DrafterInfo, modelDir, modelFingerprint string) error {
	if info.TargetFingerprint == "" || info.TargetFingerprint == modelFingerprint {
		return nil
	}
	return &StaleError{DrafterDir: info.Dir, Provenance: info.Provenance, DrafterFingerprint: info.TargetFingerprint,
		ModelDir: modelDir, ModelFingerprint: modelFingerprint}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
