package capture

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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
// Shards, Totals, BytesPerToken, Complete and SHA256.
type Manifest struct {
	// FormatVersion is the version of this format (FormatVersion).
	FormatVersion int `json:"format_version"`
	// ModelFingerprint identifies the teacher checkpoint (checkpoint.Fingerprint).
	ModelFingerprint string `json:"model_fingerprint"`
	// Layers are the captured Hugging Face hidden_states indices, strictly increasing.
	Layers []int `json:"layers"`
	// FinalNorm tells whether the final_norm column is present.
	FinalNorm bool `json:"final_norm"`
	// Serves names the drafter methods whose default training reads only
	// states this capture holds (methods.Serves when it was made); drafter
	// train names the layers to capture for any other.
	Serves []string `json:"serves,omitempty"`
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
	// SHA256 is the manifest's own checksum (ManifestSHA256 of its other
	// fields), as shards and training checkpoints carry theirs: one flipped
	// bit of a setting (the temperature decides how EAGLE-3 is trained) is
	// refused instead of trusted. Manifests written before it existed have
	// none; ReadManifest reads them, and Checksummed tells.
	SHA256 string `json:"sha256,omitempty"`

	// unsealed is set by ReadManifest when the file records no SHA256.
	unsealed bool
}

// Checksummed reports whether the manifest was read with a checksum that
// matched (false for one written before manifests carried SHA256, which only
// its cross-checks vouch for).
func (m *Manifest) Checksummed() bool { return !m.unsealed }

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

// ReadManifest reads dir/manifest.json and checks it: its SHA-256 when it
// records one (a mismatch is an error naming the file; an older manifest
// without one is read, and Checksummed reports it), that it is
// self-consistent, and that the fields it records twice agree (crossCheck).
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
	if m.SHA256 == "" {
		m.unsealed = true
	} else {
		sum, err := ManifestSHA256(b)
		if err != nil {
			return nil, fmt.Errorf("capture: parse %s: %w", path, err)
		}
		if sum != m.SHA256 {
			return nil, fmt.Errorf("capture: %s is damaged: its content does not match the SHA-256 it was written with (%s, now %s); "+
				"restore it from a copy, or capture again", path, m.SHA256, sum)
		}
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
	t, bpt := m.Totals, m.BytesPerToken
	m.recount()
	if t != m.Totals {
		return nil, fmt.Errorf("capture: %s: totals %+v do not match the sum of the shards %+v", path, t, m.Totals)
	}
	if bpt != m.BytesPerToken {
		return nil, fmt.Errorf("capture: %s: bytes_per_token %v does not match the totals (%d bytes / %d rows = %v)", path, bpt, t.Bytes, t.Rows, m.BytesPerToken)
	}
	if err := m.crossCheck(); err != nil {
		return nil, fmt.Errorf("capture: %s: %w; the manifest was damaged or edited: restore it from a copy, or capture again", path, err)
	}
	return &m, nil
}

// ManifestSHA256 returns the checksum a manifest records of itself: the
// SHA-256 of its JSON object without the "sha256" key, as canonical JSON
// (keys sorted, no spaces, numbers as written), so that the sum does not
// depend on indentation or key order, while every value, key and number
// spelling counts. Tools that amend a manifest record it anew (or use
// WriteManifest).
func ManifestSHA256(raw []byte) (string, error) {
	var v map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	delete(v, "sha256")
	c, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// WriteManifest writes m as dir's manifest.json atomically, with its totals
// recounted and its checksum recorded. The capture writer keeps its manifest
// itself; this is for tools that amend one.
func WriteManifest(dir string, m *Manifest) error { return writeManifest(dir, m) }

// writeManifest writes m to dir/manifest.json atomically: a temporary file in the same
// directory, fsync, rename, directory fsync. It records the checksum last.
func writeManifest(dir string, m *Manifest) error {
	m.recount()
	m.SHA256 = ""
	b, err := json.MarshalIndent(m, "", "  ")
	if err == nil {
		m.SHA256, err = ManifestSHA256(b)
	}
	if err == nil {
		b, err = json.MarshalIndent(m, "", "  ")
	}
	if err != nil {
		return fmt.Errorf("capture: encode manifest: %w", err)
	}
	m.unsealed = false
	b = append(b, '\n')
	af, err := createAtomic(dir, ManifestName)
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	if _, err := af.Write(b); err != nil {
		af.Abort()
		return fmt.Errorf("capture: writing %s: %w", af.TempName(), err)
	}
	if err := af.Commit(); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	return nil
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
