package train

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/eagle3"
)

// DataDir is one capture directory as checked by CheckData.
type DataDir struct {
	// Dir is the directory as given.
	Dir string `json:"dir"`
	// ManifestSHA256 is the lowercase hex SHA-256 of its manifest.json bytes.
	ManifestSHA256 string `json:"manifest_sha256"`
	// Manifest is the parsed manifest.
	Manifest *capture.Manifest `json:"-"`
}

// Needs says which state columns a method reads.
type Needs struct {
	// Method names the method in error messages.
	Method string
	// FinalNorm requires the final_norm column (the state after the final norm).
	FinalNorm bool
	// Layers are Hugging Face hidden_states indices that must have been captured
	// (repeats allowed), with LayersFromFlag telling whether they came from
	// --layers (for the error message).
	Layers         []int
	LayersFromFlag bool
}

// CheckData reads the manifest of every capture directory and checks it
// against the target before any shard is opened: the recorded model
// fingerprint must equal fingerprint, the hidden size must equal hidden, and
// every column of need must have been captured. Errors name the directory and
// what was expected. It returns each directory with its manifest's hash.
func CheckData(dirs []string, fingerprint string, hidden int, need Needs) ([]DataDir, error) {
	if len(dirs) == 0 {
		return nil, fmt.Errorf("train: no capture directory given (--data DIR[,DIR...])")
	}
	out := make([]DataDir, 0, len(dirs))
	seen := map[string]string{}
	for _, dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, capture.ManifestName))
		if err != nil {
			return nil, fmt.Errorf("train: --data %s is not a capture directory (made by drafter distill): %w", dir, err)
		}
		m, err := capture.ReadManifest(dir)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(raw)
		h := hex.EncodeToString(sum[:])
		if prev, ok := seen[h]; ok {
			return nil, fmt.Errorf("train: --data lists the same capture twice (%s and %s have identical manifests); each sample would be trained on twice", prev, dir)
		}
		seen[h] = dir
		if m.ModelFingerprint != fingerprint {
			return nil, fmt.Errorf("train: capture %s was made from another model: its manifest records model fingerprint %s, but --model has fingerprint %s (see drafter inspect); capture again with this model",
				dir, m.ModelFingerprint, fingerprint)
		}
		if m.HiddenSize != hidden {
			return nil, fmt.Errorf("train: capture %s holds hidden states of size %d, but the target's hidden_size is %d", dir, m.HiddenSize, hidden)
		}
		if need.FinalNorm && !m.FinalNorm {
			return nil, fmt.Errorf("train: capture %s has no %s column (the target's last hidden state after its final norm), which %s trains on; it holds %s. Capture again with drafter distill keeping the final-norm state",
				dir, capture.ColFinalNorm, need.Method, columnList(m))
		}
		for c, k := range need.Layers {
			if hasLayer(m.Layers, k) {
				continue
			}
			src := "the target's default EAGLE-3 feature layers"
			if need.LayersFromFlag {
				src = "--layers " + joinInts(need.Layers)
			}
			return nil, fmt.Errorf("train: capture %s has no %s column: Hugging Face hidden_states index %d, the %s %s feature layer from %s, was not captured; "+
				"it was distilled with --layers %s (columns: %s). Train with --layers naming 3 captured indices, or capture again with --layers %s",
				dir, capture.ColumnName(k), k, eagle3.FeatureName(c), need.Method, src, joinInts(m.Layers), columnList(m), joinInts(uniq(need.Layers)))
		}
		out = append(out, DataDir{Dir: dir, ManifestSHA256: h, Manifest: m})
	}
	return out, nil
}

func hasLayer(layers []int, k int) bool {
	for _, l := range layers {
		if l == k {
			return true
		}
	}
	return false
}

func columnList(m *capture.Manifest) string {
	if len(m.Columns) == 0 {
		return "no state columns"
	}
	return strings.Join(m.Columns, ", ")
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func uniq(v []int) []int {
	var out []int
	for _, x := range v {
		if !hasLayer(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// CaptureData adapts a capture.Dataset to train/dataset.Dataset for both
// trainers: tokens, loss mask, the final_norm state and, when built with
// feature layers, the three EAGLE-3 features. It keeps no per-call state, so it
// is safe for concurrent use as capture.Dataset is; each call fills the
// caller's buffers, reallocating only when they are too small. A feature layer
// repeated in the fusion (small models: 2, 2, 2) is converted once and copied.
type CaptureData struct {
	ds       *capture.Dataset
	final    int
	features bool
	cols     [3]int
	alias    [3]int // alias[c] < c: feature c is the same column as feature alias[c]
}

// NewCaptureData wraps ds, which must hold the final_norm column and, when
// layers is not nil, hidden_<k> for each of its 3 Hugging Face hidden_states
// indices (low, mid, high).
func NewCaptureData(ds *capture.Dataset, layers []int) (*CaptureData, error) {
	d := &CaptureData{ds: ds}
	var err error
	if d.final, err = ds.ColumnIndex(capture.ColFinalNorm); err != nil {
		return nil, fmt.Errorf("train: the trainers read the %s column: %w", capture.ColFinalNorm, err)
	}
	if layers == nil {
		return d, nil
	}
	if len(layers) != 3 {
		return nil, fmt.Errorf("train: %d feature layers given, EAGLE-3 fuses 3 (low, mid, high)", len(layers))
	}
	d.features = true
	for c, k := range layers {
		if d.cols[c], err = ds.ColumnIndex(capture.ColumnName(k)); err != nil {
			return nil, fmt.Errorf("train: eagle3 %s feature layer (hidden_states index %d): %w", eagle3.FeatureName(c), k, err)
		}
		d.alias[c] = c
		for j := 0; j < c; j++ {
			if layers[j] == k {
				d.alias[c] = j
				break
			}
		}
	}
	return d, nil
}

// NumSamples returns the number of samples over all capture directories.
func (d *CaptureData) NumSamples() int { return d.ds.NumSamples() }

// Hidden returns the hidden size H.
func (d *CaptureData) Hidden() int { return d.ds.HiddenSize() }

// Sample fills dst with sample i: tokens and loss mask, plus the states what
// asks for (the others resliced to length 0, their buffers kept).
func (d *CaptureData) Sample(i int, dst *dataset.Sample, what dataset.Fields) error {
	if i < 0 || i >= d.ds.NumSamples() {
		return fmt.Errorf("train: sample %d out of range [0,%d)", i, d.ds.NumSamples())
	}
	if what.Has(dataset.Features) && !d.features {
		return fmt.Errorf("train: sample %d: feature layers requested from a capture adapter built without them", i)
	}
	dst.Tokens = d.ds.Tokens(i, dst.Tokens)
	dst.LossMask = d.ds.LossMask(i, dst.LossMask)
	dst.Final = dst.Final[:0]
	if what.Has(dataset.Final) {
		dst.Final = d.ds.State(i, d.final, dst.Final)
	}
	for c := range dst.Features {
		f := dst.Features[c][:0]
		if what.Has(dataset.Features) {
			if a := d.alias[c]; a != c {
				f = append(f, dst.Features[a]...)
			} else {
				f = d.ds.State(i, d.cols[c], f)
			}
		}
		dst.Features[c] = f
	}
	return nil
}
