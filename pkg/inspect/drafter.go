package inspect

import (
	"fmt"
	"io"
	"strings"
)

// DrafterReport summarises a drafter folder as drafter eval finds it: the
// method and layout of its export, its provenance, and whether its files
// match the SHA256SUMS written with them (drafter inspect --drafter).
type DrafterReport struct {
	// Dir is the folder given; ExportDir the export folder found in it,
	// whose method is Kind ("medusa", "eagle3") and layout Layout ("vllm",
	// "medusa", "native", "speculators").
	Dir       string `json:"dir"`
	Kind      string `json:"kind"`
	Layout    string `json:"layout"`
	ExportDir string `json:"export_dir"`
	// Provenance is the drafter.json found ("" when none), and
	// TargetFingerprint the target fingerprint it records.
	Provenance        string `json:"provenance,omitempty"`
	TargetFingerprint string `json:"target_fingerprint,omitempty"`
	// Sums is the SHA256SUMS the files were verified against and Verified
	// the files it vouched for; both empty for an export from before the
	// sums, which Warning then says.
	Sums     string   `json:"sums,omitempty"`
	Verified []string `json:"verified_files,omitempty"`
	Warning  string   `json:"warning,omitempty"`
}

// WriteText prints the report for people.
func (r *DrafterReport) WriteText(w io.Writer) error {
	orNone := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	sums := "none: the export predates checksums, so its files cannot be checked for damage"
	if r.Sums != "" {
		sums = fmt.Sprintf("%d files match %s (%s)", len(r.Verified), r.Sums, strings.Join(r.Verified, ", "))
	}
	lines := [][2]string{
		{"drafter", r.Dir},
		{"method", fmt.Sprintf("%s (%s layout)", r.Kind, r.Layout)},
		{"export", r.ExportDir},
		{"provenance", orNone(r.Provenance, "none (no drafter.json)")},
		{"target", orNone(r.TargetFingerprint, "not recorded")},
		{"checksums", sums},
	}
	for _, l := range lines {
		if _, err := fmt.Fprintf(w, "%-18s %s\n", l[0]+":", l[1]); err != nil {
			return err
		}
	}
	return nil
}
