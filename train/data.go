package train

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/train/dataset"
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
	// LayerName names feature layer c in error messages (EAGLE-3: "low",
	// "mid", "high"); nil numbers them.
	LayerName func(c int) string
}

// ordinal names feature layer c by its position: "1st", "2nd", ...
func ordinal(c int) string {
	n := c + 1
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return strconv.Itoa(n) + "th"
	case n%10 == 1:
		return strconv.Itoa(n) + "st"
	case n%10 == 2:
		return strconv.Itoa(n) + "nd"
	case n%10 == 3:
		return strconv.Itoa(n) + "rd"
	}
	return strconv.Itoa(n) + "th"
}

// CheckData reads the manifest of every capture directory and checks it
// against the target before any shard is opened: the recorded model
// fingerprint must equal fingerprint, the hidden size must equal hidden, and
// every column of need must have been captured. The directories must be
// stored alike (the same state columns and storage type), and the shards of a
// distill split over several folders must fit together (checkSplits). Errors
// name the directory and what was expected. It returns each directory with
// its manifest's hash.
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
			if slices.Contains(m.Layers, k) {
				continue
			}
			src := "the target's default " + need.Method + " feature layers"
			if need.LayersFromFlag {
				src = "--layers " + joinInts(need.Layers)
			}
			name := need.LayerName
			if name == nil {
				name = ordinal
			}
			return nil, fmt.Errorf("train: capture %s has no %s column: Hugging Face hidden_states index %d, the %s %s feature layer from %s, was not captured; "+
				"it was distilled with --layers %s (columns: %s). Train with --layers naming %d captured indices, or capture again with --layers %s",
				dir, capture.ColumnName(k), k, name(c), need.Method, src, joinInts(m.Layers), columnList(m), len(need.Layers), joinInts(uniq(need.Layers)))
		}
		if len(out) > 0 {
			if err := sameLayout(out[0], DataDir{Dir: dir, Manifest: m}); err != nil {
				return nil, err
			}
		}
		out = append(out, DataDir{Dir: dir, ManifestSHA256: h, Manifest: m})
	}
	if err := checkSplits(out); err != nil {
		return nil, err
	}
	return out, nil
}

// sameLayout refuses a capture d stored unlike the first one, first: one
// training set holds one set of state columns in one storage type.
func sameLayout(first, d DataDir) error {
	a, b := first.Manifest, d.Manifest
	switch {
	case !slices.Equal(a.Layers, b.Layers) || a.FinalNorm != b.FinalNorm:
		return fmt.Errorf("train: --data %s holds the states %s, but %s holds %s: captures trained together must hold the same layers; distill %s again with --layers %s",
			d.Dir, columnList(b), first.Dir, columnList(a), d.Dir, joinInts(a.Layers))
	case a.DType != b.DType:
		return fmt.Errorf("train: --data %s stores its states as %s, but %s as %s: captures trained together must be stored alike; distill %s again with --dtype %s",
			d.Dir, b.DType, first.Dir, a.DType, d.Dir, a.DType)
	}
	return nil
}

// splitFree reports whether the shards of one --shard split may record
// different values of the distill argument k: which shard, and settings that
// change how the work is batched and stored in files but not what a sample
// holds.
func splitFree(k string) bool {
	switch k {
	case "shard", "batch", "shard_rows", "shard_bytes":
		return true
	}
	return false
}

// sampleFree reports whether the argument k leaves what a sample holds
// unchanged: splitFree, and which states are stored and how.
func sampleFree(k string) bool {
	return splitFree(k) || k == "dtype" || k == "layers"
}

// shardOf returns the --shard i/n a distill recorded; ok is false for any
// other capture.
func shardOf(m *capture.Manifest) (i, n int, ok bool) {
	if m.Args["command"] != "distill" {
		return 0, 0, false
	}
	a, b, found := strings.Cut(m.Args["shard"], "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !found || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return 0, 0, false
	}
	return i, n, true
}

// argDiff returns the first argument (in name order) that a and b record
// differently, skipping free ones, and both values ("" when unrecorded).
func argDiff(a, b map[string]string, free func(string) bool) (name, va, vb string) {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !free(k) && a[k] != b[k] {
			return k, a[k], b[k]
		}
	}
	return "", "", ""
}

// checkSplits checks the distills split over several folders: folders made
// by drafter distill --shard i/n (n > 1) from the same prompt file are the
// shards of one distill. They must record the same settings but the shard and
// how the work was batched and stored (splitFree), the same n, each index
// once and every index from 0 to n-1: a missing shard (a job that failed or
// never ran) would silently train on part of the data.
func checkSplits(dirs []DataDir) error {
	type split struct {
		first DataDir
		n     int
		have  map[int]string
	}
	splits := map[string]*split{}
	var keys []string
	for _, d := range dirs {
		i, n, ok := shardOf(d.Manifest)
		if !ok || n < 2 {
			continue
		}
		key := d.Manifest.PromptFileHash
		s := splits[key]
		if s == nil {
			s = &split{first: d, n: n, have: map[int]string{}}
			splits[key] = s
			keys = append(keys, key)
		}
		first := s.first.Manifest.Args
		if n != s.n {
			return fmt.Errorf("train: --data %s is --shard %d/%d of a distill of the same prompt file as %s, which is --shard %s: the shards of one distill split it the same way; distill %s again with --shard i/%d",
				d.Dir, i, n, s.first.Dir, first["shard"], d.Dir, s.n)
		}
		if k, va, vb := argDiff(first, d.Manifest.Args, splitFree); k != "" {
			return fmt.Errorf("train: --data %s and %s are shards of one distill of the same prompt file (--shard %s and %d/%d) but record different %s (%q and %q): the shards would not be one dataset; distill %s again with the settings of the others",
				d.Dir, s.first.Dir, first["shard"], i, n, k, vb, va, d.Dir)
		}
		if prev, dup := s.have[i]; dup {
			return fmt.Errorf("train: --data %s and %s both hold --shard %d/%d of one distill: its samples would be trained on twice; leave one of them out", prev, d.Dir, i, n)
		}
		s.have[i] = d.Dir
	}
	for _, key := range keys {
		s := splits[key]
		var have, missing []string
		for i := 0; i < s.n; i++ {
			if dir, ok := s.have[i]; ok {
				have = append(have, fmt.Sprintf("%d/%d (%s)", i, s.n, dir))
			} else {
				missing = append(missing, fmt.Sprintf("%d/%d", i, s.n))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("train: --data holds shards %s of one distill but not --shard %s: training on part of the split would leave those prompts out; add the missing shard's folder, or distill it (drafter distill --shard %s with the same settings)",
				strings.Join(have, ", "), strings.Join(missing, ", "), missing[0])
		}
	}
	return nil
}

// sampleKey names the dataset a capture's samples belong to: captures made
// by drafter distill or capture from the same prompt file with the same
// settings (but sampleFree) number the same samples alike, whatever the
// split; any other capture is a dataset of its own (d is its position).
func sampleKey(m *capture.Manifest, d int) string {
	cmd := m.Args["command"]
	if (cmd != "distill" && cmd != "capture") || m.PromptFileHash == "" {
		return "folder " + strconv.Itoa(d)
	}
	keys := make([]string, 0, len(m.Args))
	for k := range m.Args {
		if !sampleFree(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%q=%q\n", k, m.Args[k])
	}
	return b.String()
}

// sampleOrder is the order in which the trainers read the samples of ds,
// opened over dirs: the folders holding parts of one dataset (sampleKey: the
// shards of a --shard split) are read as one dataset, by sample id, so that
// the union of the shards is the unsharded distill sample for sample
// whatever the folders are called or the order they are given in; other
// folders keep the reader's order. A sample id held by two folders of one
// dataset is refused: it would be trained on twice. nil means the reader's
// order.
func sampleOrder(ds *capture.Dataset, dirs []DataDir) ([]int, error) {
	group := make([]int, len(dirs))
	index := map[string]int{}
	var members []int
	for d, dd := range dirs {
		k := sampleKey(dd.Manifest, d)
		g, ok := index[k]
		if !ok {
			g = len(members)
			index[k] = g
			members = append(members, 0)
		}
		group[d] = g
		members[g]++
	}
	if len(members) == len(dirs) {
		return nil, nil
	}
	byGroup := make([][]int, len(members))
	for i := 0; i < ds.NumSamples(); i++ {
		g := group[ds.SampleDir(i)]
		byGroup[g] = append(byGroup[g], i)
	}
	order := make([]int, 0, ds.NumSamples())
	for g, idx := range byGroup {
		if members[g] > 1 {
			slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(ds.SampleID(a), ds.SampleID(b)) })
			for k := 1; k < len(idx); k++ {
				if id := ds.SampleID(idx[k]); id == ds.SampleID(idx[k-1]) {
					return nil, fmt.Errorf("train: --data %s and %s both hold sample %d of one distill (the same prompt file and settings): it would be trained on twice; leave one of the folders out",
						dirs[ds.SampleDir(idx[k-1])].Dir, dirs[ds.SampleDir(idx[k])].Dir, id)
				}
			}
		}
		order = append(order, idx...)
	}
	return order, nil
}

// trainingData is what a run trains on: the capture folders the --data
// entries name, their checked manifests, the dataset over them and the
// trainers' view of it.
type trainingData struct {
	folders []string
	dirs    []DataDir
	ds      *capture.Dataset
	data    *CaptureData
}

// openData resolves the --data entries (ExpandData), checks the captures'
// manifests against the target (CheckData), opens them with dopt (verifying
// every shard) and adapts them for the trainers, the shards of a split read
// as one dataset (sampleOrder); featureLayers are the EAGLE-3 feature layers,
// nil for Medusa. The caller closes the dataset.
func openData(entries []string, fingerprint string, hidden int, need Needs, dopt capture.DatasetOptions, featureLayers []int) (*trainingData, error) {
	folders, err := ExpandData(entries)
	if err != nil {
		return nil, err
	}
	dirs, err := CheckData(folders, fingerprint, hidden, need)
	if err != nil {
		return nil, err
	}
	ds, err := capture.OpenDatasetWith(dopt, folders...)
	if err != nil {
		return nil, fmt.Errorf("train: --data: %w", err)
	}
	td := &trainingData{folders: folders, dirs: dirs, ds: ds}
	order, err := sampleOrder(ds, dirs)
	if err == nil {
		td.data, err = NewCaptureData(ds, featureLayers)
	}
	if err != nil {
		ds.Close()
		return nil, err
	}
	td.data.order = order
	return td, nil
}

// ExpandData resolves the --data entries to capture folders, in the order
// given: a folder holding manifest.json is a capture; a glob pattern
// (quoted on the command line, expanded here: runs/d-*) stands for the
// folders it matches, each of which must be a capture; any other folder is a
// parent whose immediate subfolders holding manifest.json are the captures
// (a --shard split written to one folder per shard). Matches come in lexical
// order. A folder named twice is refused: its samples would be trained on
// twice.
func ExpandData(specs []string) ([]string, error) {
	var out []string
	from := map[string]string{}
	add := func(dir, entry string) error {
		key := filepath.Clean(dir)
		if prev, ok := from[key]; ok {
			return fmt.Errorf("train: --data %s names the capture %s, which %s names too: its samples would be trained on twice", entry, dir, prev)
		}
		from[key] = entry
		out = append(out, dir)
		return nil
	}
	for _, e := range specs {
		if isCapture(e) {
			if err := add(e, e); err != nil {
				return nil, err
			}
			continue
		}
		if _, err := os.Stat(e); err != nil && isPattern(e) {
			matches, err := filepath.Glob(e)
			if err != nil {
				return nil, fmt.Errorf("train: --data %q: %w", e, err)
			}
			if len(matches) == 0 {
				return nil, fmt.Errorf("train: --data %s matches nothing", e)
			}
			for _, m := range matches {
				if !isCapture(m) {
					return nil, fmt.Errorf("train: --data %s matches %s, which holds no %s: not a capture folder (made by drafter distill or capture), or one whose run never wrote its manifest", e, m, capture.ManifestName)
				}
				if err := add(m, e); err != nil {
					return nil, err
				}
			}
			continue
		}
		subs, err := os.ReadDir(e)
		if err != nil {
			return nil, fmt.Errorf("train: --data %s is not a capture directory (made by drafter distill): %w", e, err)
		}
		n := 0
		for _, sub := range subs {
			dir := filepath.Join(e, sub.Name())
			if !isCapture(dir) {
				continue
			}
			if err := add(dir, e); err != nil {
				return nil, err
			}
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("train: --data %s holds no %s, and none of its subfolders does: not a capture folder (made by drafter distill or capture) nor a folder of them", e, capture.ManifestName)
		}
	}
	return out, nil
}

// isCapture reports whether dir is a folder holding a manifest.json.
func isCapture(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, capture.ManifestName))
	return err == nil && st.Mode().IsRegular()
}

// isPattern reports whether s has glob metacharacters (filepath.Match).
func isPattern(s string) bool {
	return strings.ContainsAny(s, `*?[`)
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
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// CaptureData adapts a capture.Dataset to train/dataset.Dataset for every
// trainer: tokens, loss mask, the final_norm state and, when built with
// feature layers, the method's feature layers in its order. It keeps no per-call state, so it
// is safe for concurrent use as capture.Dataset is; each call fills the
// caller's buffers, reallocating only when they are too small. A feature layer
// repeated in the list (EAGLE-3 on small models: 2, 2, 2) is converted once
// and copied.
type CaptureData struct {
	ds *capture.Dataset
	// order maps the trainers' sample index to the dataset's (sampleOrder);
	// nil is the dataset's own order.
	order    []int
	final    int
	features bool
	cols     []int
	alias    []int // alias[c] < c: feature c is the same column as feature alias[c]
}

// NewCaptureData wraps ds, which must hold the final_norm column and, when
// layers is not nil, hidden_<k> for each of its Hugging Face hidden_states
// indices, in the order the method reads them.
func NewCaptureData(ds *capture.Dataset, layers []int) (*CaptureData, error) {
	d := &CaptureData{ds: ds}
	var err error
	if d.final, err = ds.ColumnIndex(capture.ColFinalNorm); err != nil {
		return nil, fmt.Errorf("train: the trainers read the %s column: %w", capture.ColFinalNorm, err)
	}
	if layers == nil {
		return d, nil
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("train: an empty list of feature layers")
	}
	d.features = true
	d.cols, d.alias = make([]int, len(layers)), make([]int, len(layers))
	for c, k := range layers {
		if d.cols[c], err = ds.ColumnIndex(capture.ColumnName(k)); err != nil {
			return nil, fmt.Errorf("train: feature layer %d of %d (hidden_states index %d): %w", c+1, len(layers), k, err)
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

// index is the dataset's index of the trainers' sample i.
func (d *CaptureData) index(i int) int {
	if d.order != nil {
		return d.order[i]
	}
	return i
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
	i = d.index(i)
	dst.Tokens = d.ds.Tokens(i, dst.Tokens)
	dst.LossMask = d.ds.LossMask(i, dst.LossMask)
	dst.Final = dst.Final[:0]
	if what.Has(dataset.Final) {
		dst.Final = d.ds.State(i, d.final, dst.Final)
	}
	if !what.Has(dataset.Features) {
		dst.ClearFeatures()
		return nil
	}
	dst.ResizeFeatures(len(d.cols))
	for c := range dst.Features {
		if a := d.alias[c]; a != c {
			dst.Features[c] = append(dst.Features[c], dst.Features[a]...)
		} else {
			dst.Features[c] = d.ds.State(i, d.cols[c], dst.Features[c])
		}
	}
	return nil
}
