package loop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
)

// Settings are the result-affecting choices of a run, as ArgsFile records
// them: a resume must repeat them. Captures are compared by their
// manifests' hashes, in order (a capture may move; its content and the
// sample numbering may not change).
type Settings struct {
	Method            string    `json:"method"`
	TargetFingerprint string    `json:"target_fingerprint"`
	Data              []Capture `json:"data"`
	// FeatureLayers are the Hugging Face hidden_states indices the method
	// reads besides the final-norm state (EAGLE-3's fused layers).
	FeatureLayers []int          `json:"feature_layers,omitempty"`
	Trainer       map[string]any `json:"trainer"`
	// unrecorded holds the values of trainer settings that a record made by
	// an older build may lack (what that build used), so that its runs resume.
	unrecorded map[string]any
}

// notCompared reports the trainer settings a resume may change: they do not
// alter the trained weights (max_steps only cuts a run short; the schedule
// spans the epoch cap).
func notCompared(key string) bool {
	switch key {
	case "resume", "max_steps", "checkpoint_every", "log_every":
		return true
	}
	return false
}

// setTrainer records the method and the trainer's settings v (as JSON),
// with the values unrecorded of those v leaves out.
func (s *Settings) setTrainer(method string, v any, unrecorded map[string]any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("train: encoding the trainer settings: %w", err)
	}
	s.Method, s.Trainer, s.unrecorded = method, nil, unrecorded
	if err := decodeNumbers(b, &s.Trainer); err != nil {
		return fmt.Errorf("train: decoding the trainer settings: %w", err)
	}
	if s.Trainer == nil {
		s.Trainer = map[string]any{}
	}
	for k, v := range unrecorded {
		if _, ok := s.Trainer[k]; !ok {
			s.Trainer[k] = v
		}
	}
	return nil
}

// decodeNumbers decodes JSON keeping numbers as written.
func decodeNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// writeSettings writes s to out's ArgsFile.
func writeSettings(out string, s *Settings) error {
	if err := atomicfile.WriteJSON(filepath.Join(out, ArgsFile), s); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// checkResume refuses to resume the run in out with settings that differ
// from the first run's, listing every difference. A folder without
// ArgsFile holds nothing to resume, unless it has a checkpoint.
func checkResume(out string, now *Settings) error {
	path := filepath.Join(out, ArgsFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(out, CheckpointFile)); err == nil {
			return fmt.Errorf("train: cannot resume: %s has a checkpoint but no %s recording the run's settings", out, ArgsFile)
		}
		return nil // nothing to resume: a fresh run
	}
	if err != nil {
		return fmt.Errorf("train: cannot resume: %w", err)
	}
	var old Settings
	if err := decodeNumbers(raw, &old); err != nil {
		return fmt.Errorf("train: cannot resume: %s: %w", path, err)
	}
	for k, v := range now.unrecorded {
		if _, ok := old.Trainer[k]; !ok && old.Trainer != nil {
			old.Trainer[k] = v
		}
	}
	diffs := diffSettings(&old, now)
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("train: cannot resume the run in %s with different settings (a resumed run must end exactly as an uninterrupted one):\n  %s\nrepeat the first run's arguments, or train into another --out",
		out, strings.Join(diffs, "\n  "))
}

// diffSettings lists the differences between two records.
func diffSettings(old, now *Settings) []string {
	var diffs []string
	add := func(what string, a, b any) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			diffs = append(diffs, fmt.Sprintf("%s: was %s, now %s", what, ja, jb))
		}
	}
	add("method", old.Method, now.Method)
	add("target fingerprint (--model)", old.TargetFingerprint, now.TargetFingerprint)
	hashes := func(cs []Capture) []string {
		h := make([]string, len(cs))
		for i, c := range cs {
			h[i] = c.Dir + " (manifest sha256 " + c.ManifestSHA256 + ")"
		}
		return h
	}
	same := slices.EqualFunc(old.Data, now.Data, func(a, b Capture) bool { return a.ManifestSHA256 == b.ManifestSHA256 })
	if !same {
		diffs = append(diffs, fmt.Sprintf("--data: was %s, now %s", strings.Join(hashes(old.Data), ", "), strings.Join(hashes(now.Data), ", ")))
	}
	add("feature layers (--layers)", old.FeatureLayers, now.FeatureLayers)
	keys := map[string]bool{}
	for k := range old.Trainer {
		keys[k] = true
	}
	for k := range now.Trainer {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		if !notCompared(k) {
			sorted = append(sorted, k)
		}
	}
	slices.Sort(sorted)
	for _, k := range sorted {
		add(k, old.Trainer[k], now.Trainer[k])
	}
	return diffs
}
