package eval

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/methods"
)

// DrafterInfo says what a --drafter folder holds.
type DrafterInfo struct {
	// Kind is the method and Layout the export format found.
	Kind   drafters.Kind `json:"kind"`
	Layout string        `json:"layout"`
	// Dir is the export folder the drafter is loaded from (for Medusa in the
	// vLLM or FasterDecoding layout, the folder holding that layout's files).
	Dir string `json:"dir"`
	// Provenance is the drafter.json found (in Dir, or in the train output
	// folder above it), "" when there is none.
	Provenance string `json:"provenance,omitempty"`
	// TargetFingerprint is the target checkpoint fingerprint the drafter was
	// trained against, as recorded in Provenance ("" when not recorded).
	TargetFingerprint string `json:"target_fingerprint,omitempty"`

	// prov is the drafter.json found, which the method's Load checks the
	// export against; nil when there is none.
	prov *drafters.Provenance
}

// Detect finds the drafter in dir with the methods of methods.All (see
// detect).
func Detect(dir string) (*DrafterInfo, error) { return detect(methods.All(), dir) }

// detect finds the drafter in dir with the methods ms: either one export
// folder (a layout some method's Detect recognises), or the train command's
// output folder holding export subfolders (vllm/, medusa/, eagle3/, ...). In
// an output folder holding several layouts of one method the one the method
// lists first is used (they carry the same weights); one holding drafters of
// two kinds, or two exports of one layout, is an error that asks for the
// export to use. The target fingerprint is read from drafter.json in the
// export folder or, failing that, in its parent (the train output folder).
func detect(ms []drafters.Method, dir string) (*DrafterInfo, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("eval: drafter: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("eval: drafter %s is a file; want the train output folder or one export folder inside it", dir)
	}
	info, err := classify(ms, dir)
	if err != nil {
		return nil, err
	}
	if info == nil {
		info, err = detectInside(ms, dir)
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
func detectInside(ms []drafters.Method, dir string) (*DrafterInfo, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("eval: drafter: %w", err)
	}
	var found []*DrafterInfo
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := classify(ms, filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if info != nil {
			found = append(found, info)
		}
	}
	if len(found) == 0 {
		wants := make([]string, len(ms))
		for i, m := range ms {
			wants[i] = m.Wants()
		}
		return nil, fmt.Errorf("eval: %s holds no drafter: looked for %s in the folder and its subfolders", dir, strings.Join(wants, " and "))
	}
	rank := func(info *DrafterInfo) int { return slices.Index(methodOf(ms, info.Kind).Layouts(), info.Layout) }
	slices.SortStableFunc(found, func(a, b *DrafterInfo) int { return rank(a) - rank(b) })
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

// classify reports the drafter export held directly in dir, or nil: the
// layout the one method that recognises it names. A folder two methods
// recognise is refused: loading either would be a guess.
func classify(ms []drafters.Method, dir string) (*DrafterInfo, error) {
	var info *DrafterInfo
	for _, m := range ms {
		layout, err := m.Detect(dir)
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		if layout == "" {
			continue
		}
		if info != nil {
			return nil, fmt.Errorf("eval: %s holds drafters of two kinds, %s (%s layout) and %s (%s layout); keep one export per folder", dir, info.Kind, info.Layout, m.Kind(), layout)
		}
		info = &DrafterInfo{Kind: m.Kind(), Layout: layout, Dir: dir}
	}
	return info, nil
}

// readProvenance fills the provenance fields from drafter.json in the export
// folder, the folder the user named, or the export's parent, first found.
func readProvenance(info *DrafterInfo, given string) error {
	cands := []string{info.Dir, given, filepath.Dir(info.Dir)}
	for _, d := range cands {
		p := filepath.Join(d, drafters.ProvenanceFile)
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("eval: drafter provenance: %w", err)
		}
		prov := &drafters.Provenance{Path: p, Data: b}
		var fp struct {
			Fingerprint       string `json:"target_fingerprint"`
			LegacyFingerprint string `json:"fingerprint"`
		}
		if err := prov.Decode(&fp); err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		info.Provenance, info.prov = p, prov
		info.TargetFingerprint = fp.Fingerprint
		if info.TargetFingerprint == "" {
			info.TargetFingerprint = fp.LegacyFingerprint
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
