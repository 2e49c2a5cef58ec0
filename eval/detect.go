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

	// Sums is the SHA256SUMS the drafter's files were verified against
	// (drafters.SumsFile), "" for an export from before the sums; Verified
	// lists the files it vouched for, relative to its folder.
	Sums     string   `json:"sums,omitempty"`
	Verified []string `json:"verified_files,omitempty"`
	// Warning is the line to show before using the drafter ("" when none):
	// an export without sums, whose damage nothing would reveal.
	Warning string `json:"-"`

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
// The drafter's files are verified against the SHA256SUMS beside them first
// (checkSums, coveredBySums).
func detect(ms []drafters.Method, dir string) (*DrafterInfo, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("eval: drafter: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("eval: drafter %s is a file; want the train output folder or one export folder inside it", dir)
	}
	// The sums first: a damaged file is reported as damaged, not as a
	// config or drafter.json that does not parse.
	sums, verified, err := checkSums(dir)
	if err != nil {
		return nil, err
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
	if err := coveredBySums(info, dir, sums, verified); err != nil {
		return nil, err
	}
	if err := readProvenance(info, dir); err != nil {
		return nil, err
	}
	return info, nil
}

// metaDirs are the folders where the drafter.json of the export in
// info.Dir may be, in the order they are looked for: the export folder, the
// folder the user named, and the export's parent (the train output folder).
func metaDirs(info *DrafterInfo, given string) []string {
	return []string{info.Dir, given, filepath.Dir(info.Dir)}
}

// checkSums finds the SHA256SUMS drafter train wrote beside the drafter in
// dir (drafters.SumsFile): in dir (the train output folder), or in its
// parent when dir is one export folder inside it (it must then list a file
// of dir: an unrelated SHA256SUMS above is not the drafter's). It checks
// every file it lists, returning the sums (nil when there are none) and the
// files verified.
func checkSums(dir string) (*drafters.Sums, []string, error) {
	sums, err := drafters.FindSums(dir)
	if err == nil && sums == nil {
		sums, err = drafters.FindSums(filepath.Dir(dir))
		if sums != nil && !sums.Lists(dir) {
			sums = nil
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("eval: %w", err)
	}
	if sums == nil {
		return nil, nil, nil
	}
	done, err := sums.Check()
	if err != nil {
		return nil, nil, fmt.Errorf("eval: %w", err)
	}
	return sums, done, nil
}

// coveredBySums requires the sums to list the files the drafter is loaded
// from (its export's config.json and weights, and the drafter.json found
// for it) and records them in info; without sums (an older drafter's
// export) it sets info.Warning instead.
func coveredBySums(info *DrafterInfo, given string, sums *drafters.Sums, verified []string) error {
	if sums == nil {
		info.Warning = fmt.Sprintf("warning: drafter %s has no %s (an older drafter exported it): its files are not checked for damage", given, drafters.SumsFile)
		return nil
	}
	var need []string
	entries, err := os.ReadDir(info.Dir)
	if err != nil {
		return fmt.Errorf("eval: drafter: %w", err)
	}
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && (n == drafters.ConfigFile || strings.HasSuffix(n, ".safetensors")) {
			need = append(need, filepath.Join(info.Dir, n))
		}
	}
	if p := provenancePath(info, given); p != "" {
		need = append(need, p)
	}
	if err := sums.Covers(need); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	info.Sums, info.Verified = sums.Path, verified
	return nil
}

// provenancePath returns the drafter.json readProvenance reads, "" when
// there is none.
func provenancePath(info *DrafterInfo, given string) string {
	for _, d := range metaDirs(info, given) {
		p := filepath.Join(d, drafters.ProvenanceFile)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
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
	for _, d := range metaDirs(info, given) {
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
