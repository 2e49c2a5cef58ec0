package capture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// ManifestName is the manifest's file name inside a capture directory.
const ManifestName = "manifest.json"

// Totals sums the shards of a capture.
type Totals struct {
	// Rows is the number of stored token positions.
	Rows int64 `json:"rows"`
	// Samples is the number of stored samples.
	Samples int64 `json:"samples"`
	// ResponseTokens is the number of rows with loss_mask true.
	ResponseTokens int64 `json:"response_tokens"`
	// Bytes is the total size of the shard files.
	Bytes int64 `json:"bytes"`
}

// Manifest describes a capture directory (manifest.json). The caller fills the descriptive
// fields before Create; the package maintains FormatVersion, Columns, LayerConvention,
// Shards, Totals, BytesPerToken and Complete.
type Manifest struct {
	// FormatVersion is the version of this format (FormatVersion).
	FormatVersion int `json:"format_version"`
	// ModelFingerprint identifies the teacher checkpoint (checkpoint.Fingerprint).
	ModelFingerprint string `json:"model_fingerprint"`
	// Layers are the captured Hugging Face hidden_states indices, strictly increasing.
	Layers []int `json:"layers"`
	// FinalNorm tells whether the final_norm column is present.
	FinalNorm bool `json:"final_norm"`
	// Columns are the state column names in storage order.
	Columns []string `json:"columns"`
	// LayerConvention states what the indices and names mean (the LayerConvention constant).
	LayerConvention string `json:"layer_convention"`
	// DType is the storage dtype of the states.
	DType DType `json:"dtype"`
	// HiddenSize is H.
	HiddenSize int `json:"hidden_size"`
	// TokenizerHash is the SHA-256 of the tokenizer files used.
	TokenizerHash string `json:"tokenizer_hash,omitempty"`
	// ChatTemplateHash is the SHA-256 of the chat template used ("" when none).
	ChatTemplateHash string `json:"chat_template_hash,omitempty"`
	// Generation holds the generation settings, as the caller chose to describe them. After
	// ReadManifest it is the decoded JSON value (usually map[string]any).
	Generation any `json:"generation,omitempty"`
	// Seed is the random seed of the generation.
	Seed int64 `json:"seed"`
	// PromptFileHash is the SHA-256 of the prompt file.
	PromptFileHash string `json:"prompt_file_hash,omitempty"`
	// Args are the arguments that must be equal for a resume to continue this capture
	// (compared by OpenForResume). Put everything that changes the output in here.
	Args map[string]string `json:"args"`
	// Shards lists the finished shards in order.
	Shards []ShardInfo `json:"shards"`
	// Totals sums Shards.
	Totals Totals `json:"totals"`
	// BytesPerToken is Totals.Bytes / Totals.Rows (0 when empty).
	BytesPerToken float64 `json:"bytes_per_token"`
	// Complete is true once the capture finished normally (Writer.Close).
	Complete bool `json:"complete"`
}

// Layout returns the storage layout the manifest describes.
func (m *Manifest) Layout() Layout {
	return Layout{Layers: append([]int(nil), m.Layers...), FinalNorm: m.FinalNorm, Hidden: m.HiddenSize, DType: m.DType}
}

// recount recomputes Totals and BytesPerToken from Shards.
func (m *Manifest) recount() {
	var t Totals
	for _, s := range m.Shards {
		t.Rows += s.Rows
		t.Samples += s.Samples
		t.ResponseTokens += s.ResponseTokens
		t.Bytes += s.Bytes
	}
	m.Totals = t
	m.BytesPerToken = 0
	if t.Rows > 0 {
		m.BytesPerToken = float64(t.Bytes) / float64(t.Rows)
	}
}

// ReadManifest reads dir/manifest.json and checks that it is self-consistent.
func ReadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestName)
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("capture: %s not found: %s is not a capture directory (or the capture never started)", path, dir)
		}
		return nil, fmt.Errorf("capture: read manifest: %w", err)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("capture: parse %s: %w", path, err)
	}
	if m.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("capture: %s: format_version %d, this drafter reads version %d", path, m.FormatVersion, FormatVersion)
	}
	if err := m.Layout().Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if want := m.Layout().Columns(); !slices.Equal(want, m.Columns) {
		return nil, fmt.Errorf("capture: %s: columns %v do not match layers %v and final_norm %v (expected %v)",
			path, m.Columns, m.Layers, m.FinalNorm, want)
	}
	seen := map[string]bool{}
	for i, s := range m.Shards {
		if s.File != ShardFileName(s.Index) {
			return nil, fmt.Errorf("capture: %s: shard %d is named %q, expected %q for index %d", path, i, s.File, ShardFileName(s.Index), s.Index)
		}
		if seen[s.File] {
			return nil, fmt.Errorf("capture: %s: shard %s is listed twice", path, s.File)
		}
		seen[s.File] = true
	}
	t := m.Totals
	m.recount()
	if t != m.Totals {
		return nil, fmt.Errorf("capture: %s: totals %+v do not match the sum of the shards %+v", path, t, m.Totals)
	}
	return &m, nil
}

// writeManifest writes m to dir/manifest.json atomically: a temporary file in the same
// directory, fsync, rename, directory fsync.
func writeManifest(dir string, m *Manifest) error {
	m.recount()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("capture: encode manifest: %w", err)
	}
	b = append(b, '\n')
	return writeFileAtomic(dir, ManifestName, b)
}

// writeFileAtomic writes data to dir/name through name.tmp, fsync and rename, then fsyncs dir.
func writeFileAtomic(dir, name string, data []byte) error {
	final := filepath.Join(dir, name)
	tmp := final + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("capture: create %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("capture: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("capture: fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("capture: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("capture: rename %s: %w", tmp, err)
	}
	return syncDir(dir)
}

// Verify reads the manifest of dir and verifies every listed shard: its size
// and SHA-256 against the manifest, and every stored state for NaN and
// infinity, several shards at once. It returns the first problem in manifest
// order, naming the file (and for a non-finite value its row, sample,
// position and column), or nil when all shards are sound.
func Verify(dir string) error {
	m, err := ReadManifest(dir)
	if err != nil {
		return err
	}
	_, _, err = openShards(shardRefs(dir, m), checks{verify: true})
	return err
}

// shardRefs lists the shards of the capture in dir, described by m.
func shardRefs(dir string, m *Manifest) []shardRef {
	refs := make([]shardRef, len(m.Shards))
	for i, s := range m.Shards {
		refs[i] = shardRef{dir: dir, info: s, layout: m.Layout()}
	}
	return refs
}
