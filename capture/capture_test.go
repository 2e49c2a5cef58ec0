package capture

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/drafter-ai/drafter/internal/testutil"
)

var testLayout = Layout{Layers: []int{0, 2, 3}, FinalNorm: true, Hidden: 24, DType: Float16}

func testManifest(l Layout) Manifest {
	return Manifest{
		ModelFingerprint: "sha256:model-a", Layers: l.Layers, FinalNorm: l.FinalNorm, HiddenSize: l.Hidden, DType: l.DType,
		TokenizerHash: "sha256:tok", ChatTemplateHash: "sha256:tpl", Seed: 42, PromptFileHash: "sha256:prompts",
		Generation: map[string]any{"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 64},
		Args:       map[string]string{"model": "m", "dtype": string(l.DType), "layers": strings.Trim(strings.ReplaceAll(fmt.Sprint(l.Layers), " ", ","), "[]"), "seed": "42"},
	}
}

// makeSample builds a deterministic sample of id with length T; values come from a
// seeded generator so any sample can be rebuilt for comparison.
func makeSample(id int64, T int, l Layout) Sample {
	rng := rand.New(rand.NewSource(id*7919 + 1))
	s := Sample{ID: id, Tokens: make([]int32, T), LossMask: make([]bool, T)}
	prompt := 1 + rng.Intn(T)
	for t := 0; t < T; t++ {
		s.Tokens[t] = int32(rng.Intn(32000))
		s.LossMask[t] = t >= prompt
	}
	for range l.Columns() {
		st := make([]float32, T*l.Hidden)
		for i := range st {
			switch rng.Intn(8) {
			case 0:
				st[i] = float32(rng.NormFloat64() * 1e-6) // float16 subnormal range
			case 1:
				st[i] = float32(rng.NormFloat64() * 300)
			default:
				st[i] = float32(rng.NormFloat64())
			}
		}
		s.States = append(s.States, st)
	}
	return s
}

func sampleLen(id int64) int { return 1 + int(id*37%23) }

// writeCapture writes samples ids into a new capture in dir and closes it.
func writeCapture(t *testing.T, dir string, l Layout, opt ShardOptions, ids []int64) *Manifest {
	t.Helper()
	w, err := Create(dir, testManifest(l), opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := w.Write(makeSample(id, sampleLen(id), l)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// openDataset opens the capture in dir, closed when the test ends.
func openDataset(tb testing.TB, dir string) *Dataset {
	tb.Helper()
	ds, err := OpenDataset(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ds.Close() })
	return ds
}

func idRange(lo, hi int64) []int64 {
	var ids []int64
	for i := lo; i < hi; i++ {
		ids = append(ids, i)
	}
	return ids
}

// stored returns what the storage dtype keeps of v.
func stored(v float32, dt DType) float32 {
	if dt == Float16 {
		return float16.Fromfloat32(v).Float32()
	}
	return v
}

// checkDataset compares every sample of ds with the regenerated original.
func checkDataset(t *testing.T, ds *Dataset, l Layout, wantIDs []int64) {
	t.Helper()
	if ds.NumSamples() != len(wantIDs) {
		t.Fatalf("dataset has %d samples, want %d", ds.NumSamples(), len(wantIDs))
	}
	var got []int64
	var buf SampleBuf
	cols := make([]int, len(ds.Columns()))
	for i := range cols {
		cols[i] = i
	}
	var tokens int64
	for i := 0; i < ds.NumSamples(); i++ {
		ds.ReadSample(i, cols, &buf)
		want := makeSample(buf.ID, sampleLen(buf.ID), l)
		got = append(got, buf.ID)
		tokens += int64(len(buf.Tokens))
		if !reflect.DeepEqual(buf.Tokens, want.Tokens) || !reflect.DeepEqual(buf.LossMask, want.LossMask) {
			t.Fatalf("sample %d: tokens or loss mask differ", buf.ID)
		}
		for c := range cols {
			for j, v := range want.States[c] {
				if g, w := buf.States[c][j], stored(v, ds.mans[buf.Dir].DType); math.Float32bits(g) != math.Float32bits(w) {
					t.Fatalf("sample %d column %s element %d: read %g, want %g (from %g)", buf.ID, ds.Columns()[c], j, g, w, v)
				}
			}
		}
	}
	sort.Slice(got, func(a, b int) bool { return got[a] < got[b] })
	w := append([]int64(nil), wantIDs...)
	sort.Slice(w, func(a, b int) bool { return w[a] < w[b] })
	if !reflect.DeepEqual(got, w) {
		t.Fatalf("sample ids %v, want %v", got, w)
	}
	if tokens != ds.NumTokens() {
		t.Fatalf("NumTokens %d, samples hold %d", ds.NumTokens(), tokens)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, dt := range []DType{Float16, Float32} {
		t.Run(string(dt), func(t *testing.T) {
			l := testLayout
			l.DType = dt
			dir := t.TempDir()
			ids := idRange(0, 40)
			m := writeCapture(t, dir, l, ShardOptions{}, ids)
			if len(m.Shards) != 1 || !m.Complete || m.Totals.Samples != 40 {
				t.Fatalf("manifest: %d shards, complete %v, %d samples", len(m.Shards), m.Complete, m.Totals.Samples)
			}
			var rows, resp int64
			for _, id := range ids {
				s := makeSample(id, sampleLen(id), l)
				rows += int64(len(s.Tokens))
				for _, b := range s.LossMask {
					if b {
						resp++
					}
				}
			}
			if m.Totals.Rows != rows || m.Totals.ResponseTokens != resp {
				t.Fatalf("totals %+v, want rows %d response tokens %d", m.Totals, rows, resp)
			}
			st, _ := os.Stat(filepath.Join(dir, m.Shards[0].File))
			if st.Size() != m.Totals.Bytes || m.BytesPerToken != float64(st.Size())/float64(rows) {
				t.Fatalf("bytes %d / per token %g, file is %d bytes", m.Totals.Bytes, m.BytesPerToken, st.Size())
			}
			if err := Verify(dir); err != nil {
				t.Fatal(err)
			}
			ds := openDataset(t, dir)
			checkDataset(t, ds, l, ids)
			if ds.NumResponseTokens() != resp {
				t.Fatalf("NumResponseTokens %d, want %d", ds.NumResponseTokens(), resp)
			}
			// StateRows is a window of State.
			i := 5
			full := ds.State(i, 1, nil)
			part := ds.StateRows(i, 1, 1, ds.SampleLen(i), nil)
			if !reflect.DeepEqual(full[l.Hidden:], part) {
				t.Fatal("StateRows(1, T) differs from State[H:]")
			}
			if c, err := ds.ColumnIndex("final_norm"); err != nil || c != 3 {
				t.Fatalf("ColumnIndex(final_norm) = %d, %v", c, err)
			}
			if _, err := ds.ColumnIndex("hidden_1"); err == nil || !strings.Contains(err.Error(), "hidden_2") {
				t.Fatalf("ColumnIndex(hidden_1) error %v should list the columns", err)
			}
		})
	}
}

func TestManifestDescribesCapture(t *testing.T) {
	dir := t.TempDir()
	writeCapture(t, dir, testLayout, ShardOptions{}, idRange(0, 3))
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Columns, []string{"hidden_0", "hidden_2", "hidden_3", "final_norm"}) {
		t.Fatalf("columns %v", m.Columns)
	}
	if m.LayerConvention != LayerConvention || !strings.Contains(m.LayerConvention, "0 = embedding output") {
		t.Fatalf("layer convention %q", m.LayerConvention)
	}
	g, ok := m.Generation.(map[string]any)
	if !ok || g["temperature"] != 0.7 || m.Seed != 42 || m.TokenizerHash != "sha256:tok" || m.Args["layers"] != "0,2,3" {
		t.Fatalf("descriptive fields lost: %+v", m)
	}
	// The schema carries the same description.
	ds := openDataset(t, dir)
	sc := ds.shards[0].fr.Schema()
	md := sc.Metadata()
	if v, _ := md.GetValue(metaLayers); v != "0,2,3" {
		t.Fatalf("schema metadata layers %q", v)
	}
	if v, _ := md.GetValue(metaDType); v != "float16" {
		t.Fatalf("schema metadata dtype %q", v)
	}
	f, _ := sc.FieldsByName("hidden_2")
	if v, _ := f[0].Metadata.GetValue(fieldMetaIndex); v != "2" {
		t.Fatalf("hidden_2 field metadata %q", v)
	}
}

func TestUnstorableValueNamesSampleAndSuggestsFloat32(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(testLayout), ShardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if err := w.Write(makeSample(1, 4, testLayout)); err != nil {
		t.Fatal(err)
	}
	// An overflow suggests float32; a NaN or an infinity, which no dtype stores, is named
	// as what the model produced instead.
	for _, c := range []struct {
		bad  float32
		want string
	}{{65520, "--dtype float32"}, {float32(math.Inf(-1)), "the model produced -Inf"}, {float32(math.NaN()), "the model produced NaN"}} {
		bad, want := c.bad, c.want
		s := makeSample(7, 4, testLayout)
		s.States[2][2*testLayout.Hidden+5] = bad // hidden_3, position 2
		err := w.Write(s)
		if err == nil {
			t.Fatalf("value %g was accepted", bad)
		}
		for _, want := range []string{"sample 7", "position 2", "hidden_3", "element 5", want} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not mention %q", err, want)
			}
		}
		if want != "--dtype float32" && strings.Contains(err.Error(), "float32") {
			t.Fatalf("error %q suggests float32 storage for a value no dtype stores", err)
		}
	}
	// The rejected sample left nothing behind; the writer is still usable, and sample 7
	// can be written once fixed.
	if err := w.Write(makeSample(7, 4, testLayout)); err != nil {
		t.Fatal(err)
	}
	m, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if m.Totals.Samples != 2 || m.Totals.Rows != 8 {
		t.Fatalf("totals %+v, want 2 samples 8 rows", m.Totals)
	}
	// float32 storage rejects inf and NaN too, without suggesting float32.
	l := testLayout
	l.DType = Float32
	w2, err := Create(t.TempDir(), testManifest(l), ShardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Abort()
	s := makeSample(3, 4, l)
	s.States[0][1] = 65520
	if err := w2.Write(s); err != nil {
		t.Fatalf("65520 is a float32: %v", err)
	}
	s = makeSample(4, 4, l)
	s.States[3][l.Hidden] = float32(math.Inf(1))
	if err := w2.Write(s); err == nil || !strings.Contains(err.Error(), "sample 4 position 1 column final_norm") || !strings.Contains(err.Error(), "+Inf") {
		t.Fatalf("inf in float32: error %v", err)
	}
}

func TestWriteRejectsMalformedSamples(t *testing.T) {
	w, err := Create(t.TempDir(), testManifest(testLayout), ShardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	good := func() Sample { return makeSample(1, 3, testLayout) }
	cases := map[string]func(*Sample){
		"no tokens":  func(s *Sample) { s.Tokens, s.LossMask = nil, nil },
		"loss mask":  func(s *Sample) { s.LossMask = s.LossMask[:2] },
		"state":      func(s *Sample) { s.States = s.States[:3] },
		"tokens*hid": func(s *Sample) { s.States[1] = s.States[1][:10] },
	}
	for name, mod := range cases {
		s := good()
		mod(&s)
		if err := w.Write(s); err == nil {
			t.Errorf("%s: malformed sample accepted", name)
		}
	}
	if err := w.Write(good()); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(good()); err == nil || !strings.Contains(err.Error(), "already written") {
		t.Fatalf("duplicate id: %v", err)
	}
}

func TestShardRotation(t *testing.T) {
	dir := t.TempDir()
	ids := idRange(100, 160)
	var seen []ShardInfo
	w, err := Create(dir, testManifest(testLayout), ShardOptions{MaxRows: 50, BatchBytes: 4000, OnShard: func(s ShardInfo) error {
		seen = append(seen, s)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	var lens []int
	for _, id := range ids {
		lens = append(lens, sampleLen(id))
		if err := w.Write(makeSample(id, sampleLen(id), testLayout)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Shards) < 5 || !reflect.DeepEqual(seen, m.Shards) {
		t.Fatalf("%d shards (callback saw %d)", len(m.Shards), len(seen))
	}
	// Replay the rotation rule: a shard closes after the first sample that brings it to 50 rows.
	k, rows, n := 0, 0, 0
	for i, L := range lens {
		sh := m.Shards[k]
		if n == 0 && sh.FirstSampleID != ids[i] {
			t.Fatalf("shard %d starts with %d, want %d", k, sh.FirstSampleID, ids[i])
		}
		rows += L
		n++
		if rows >= 50 || i == len(lens)-1 {
			if sh.Rows != int64(rows) || sh.Samples != int64(n) || sh.LastSampleID != ids[i] ||
				sh.File != ShardFileName(k) || sh.Index != k {
				t.Fatalf("shard %d: %+v, want %d rows %d samples ending with %d", k, sh, rows, n, ids[i])
			}
			k, rows, n = k+1, 0, 0
		}
	}
	if k != len(m.Shards) {
		t.Fatalf("%d shards, replay expects %d", len(m.Shards), k)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(m.Shards)+1 {
		t.Fatalf("directory holds %d entries, want %d shards + manifest", len(entries), len(m.Shards))
	}
	ds := openDataset(t, dir)
	checkDataset(t, ds, testLayout, ids)
	if len(ds.shards[0].batches) < 2 {
		t.Fatalf("BatchBytes 4000 should give several record batches per shard, got %d", len(ds.shards[0].batches))
	}

	// Byte-based rotation.
	dir2 := t.TempDir()
	m2 := writeCapture(t, dir2, testLayout, ShardOptions{MaxBytes: 20000}, ids)
	for i, s := range m2.Shards[:len(m2.Shards)-1] {
		if s.Bytes < 20000 || s.Bytes > 20000+40000 {
			t.Fatalf("shard %d is %d bytes for a 20000-byte target", i, s.Bytes)
		}
	}
	if len(m2.Shards) < 3 {
		t.Fatalf("byte rotation gave %d shards", len(m2.Shards))
	}
}

func TestDeterministicFiles(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	ma := writeCapture(t, a, testLayout, ShardOptions{MaxRows: 64}, idRange(0, 30))
	mb := writeCapture(t, b, testLayout, ShardOptions{MaxRows: 64}, idRange(0, 30))
	if !reflect.DeepEqual(ma.Shards, mb.Shards) {
		t.Fatal("the same samples gave different shards")
	}
	ja, _ := os.ReadFile(filepath.Join(a, ManifestName))
	jb, _ := os.ReadFile(filepath.Join(b, ManifestName))
	if string(ja) != string(jb) {
		t.Fatal("the same capture gave different manifests")
	}
}

func TestCreateRefusesExistingCapture(t *testing.T) {
	dir := t.TempDir()
	writeCapture(t, dir, testLayout, ShardOptions{}, idRange(0, 2))
	if _, err := Create(dir, testManifest(testLayout), ShardOptions{}); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("Create over a capture: %v", err)
	}
	bad := testManifest(testLayout)
	bad.Layers = []int{3, 2}
	if _, err := Create(t.TempDir(), bad, ShardOptions{}); err == nil {
		t.Fatal("decreasing layers accepted")
	}
}

func TestIncompleteCaptureRefusedByReader(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(testLayout), ShardOptions{MaxRows: 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range idRange(0, 10) {
		if err := w.Write(makeSample(id, sampleLen(id), testLayout)); err != nil {
			t.Fatal(err)
		}
	}
	listed := w.Manifest().Shards
	w.Abort()
	if _, err := OpenDataset(dir); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Fatalf("incomplete capture opened: %v", err)
	}
	ds, err := OpenDatasetWith(DatasetOptions{AllowIncomplete: true}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	var n int64
	for _, s := range listed {
		n += s.Samples
	}
	if int64(ds.NumSamples()) != n || n == 0 {
		t.Fatalf("incomplete capture: %d samples, manifest lists %d", ds.NumSamples(), n)
	}
}

func TestMultipleDirectories(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeCapture(t, a, testLayout, ShardOptions{MaxRows: 40}, idRange(0, 12))
	l32 := testLayout
	l32.DType = Float32
	writeCapture(t, b, l32, ShardOptions{}, idRange(0, 5)) // same ids, other dir: allowed
	ds, err := OpenDataset(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if ds.NumSamples() != 17 || ds.SampleDir(12) != 1 || ds.SampleID(12) != 0 {
		t.Fatalf("%d samples; sample 12 from dir %d id %d", ds.NumSamples(), ds.SampleDir(12), ds.SampleID(12))
	}
	checkDataset(t, ds, testLayout, append(idRange(0, 12), idRange(0, 5)...))
	ds.Close()

	other := testManifest(testLayout)
	other.ModelFingerprint = "sha256:model-b"
	c := t.TempDir()
	w, err := Create(c, other, ShardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(makeSample(0, 3, testLayout)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = OpenDataset(a, c)
	if err == nil || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), c) || !strings.Contains(err.Error(), "different models") {
		t.Fatalf("different fingerprints: %v", err)
	}
	lh := testLayout
	lh.Hidden = 8
	d := t.TempDir()
	writeCapture(t, d, lh, ShardOptions{}, idRange(0, 2))
	if _, err := OpenDataset(a, d); err == nil || !strings.Contains(err.Error(), "hidden sizes (24 and 8)") {
		t.Fatalf("different hidden sizes: %v", err)
	}
	ll := testLayout
	ll.Layers = []int{0, 2}
	e := t.TempDir()
	writeCapture(t, e, ll, ShardOptions{}, idRange(0, 2))
	if _, err := OpenDataset(a, e); err == nil || !strings.Contains(err.Error(), "different states") {
		t.Fatalf("different layers: %v", err)
	}
}

// --- crash and resume, simulated at the file level ---

// interrupted writes ids with small shards and stops without Close, as a killed process
// would; it returns the ids recorded in finished shards.
func interrupted(t *testing.T, dir string, ids []int64) []int64 {
	t.Helper()
	w, err := Create(dir, testManifest(testLayout), ShardOptions{MaxRows: 40})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := w.Write(makeSample(id, sampleLen(id), testLayout)); err != nil {
			t.Fatal(err)
		}
	}
	// Simulate the kill: the open shard's temporary file stays behind.
	if w.sw.cur == nil {
		t.Fatal("test needs an unfinished shard")
	}
	if err := w.sw.cur.af.Flush(); err != nil {
		t.Fatal(err)
	}
	var done []int64
	for _, s := range w.Manifest().Shards {
		for _, id := range ids {
			if id >= s.FirstSampleID && id <= s.LastSampleID {
				done = append(done, id)
			}
		}
	}
	return done
}

func TestResumeAfterKillDuringShardWrite(t *testing.T) {
	dir := t.TempDir()
	all := idRange(0, 50)
	done := interrupted(t, dir, all[:27])
	tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	if len(tmps) != 1 {
		t.Fatalf("expected one leftover temporary shard, found %v", tmps)
	}
	// A manifest write killed half-way leaves a partial manifest.json.tmp.
	if err := os.WriteFile(filepath.Join(dir, "manifest.json.tmp"), []byte(`{"format_version": 1, "shar`), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := OpenForResume(dir, testManifest(testLayout).Args)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Removed) != 2 {
		t.Fatalf("removed %v, want the shard and manifest temporary files", rs.Removed)
	}
	if len(rs.Done) != len(done) {
		t.Fatalf("%d samples done, want %d", len(rs.Done), len(done))
	}
	for _, id := range done {
		if !rs.IsDone(id) {
			t.Fatalf("sample %d is in a finished shard but not reported done", id)
		}
	}
	if rs.NextShard != len(rs.Manifest.Shards) {
		t.Fatalf("next shard %d, %d listed", rs.NextShard, len(rs.Manifest.Shards))
	}
	finishResume(t, dir, rs, all)
}

// finishResume writes the samples of all that rs does not hold, closes, and checks that the
// capture holds every sample exactly once and verifies.
func finishResume(t *testing.T, dir string, rs *ResumeState, all []int64) {
	t.Helper()
	w, err := rs.Writer(ShardOptions{MaxRows: 40})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range all {
		if rs.IsDone(id) {
			if err := w.Write(makeSample(id, sampleLen(id), testLayout)); err == nil {
				t.Fatalf("sample %d was written twice", id)
			}
			continue
		}
		if err := w.Write(makeSample(id, sampleLen(id), testLayout)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !m.Complete || m.Totals.Samples != int64(len(all)) {
		t.Fatalf("after resume: complete %v, %d samples", m.Complete, m.Totals.Samples)
	}
	if err := Verify(dir); err != nil {
		t.Fatal(err)
	}
	ds := openDataset(t, dir)
	checkDataset(t, ds, testLayout, all)
}

func TestResumeRemovesUnrecordedShard(t *testing.T) {
	dir := t.TempDir()
	all := idRange(0, 50)
	interrupted(t, dir, all[:27])
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Killed between rename and manifest: the next shard exists under its final name.
	tmp, _ := filepath.Glob(filepath.Join(dir, "shard-*.arrow.tmp"))
	unrecorded := ShardFileName(len(m.Shards))
	if err := os.Rename(tmp[0], filepath.Join(dir, unrecorded)); err != nil {
		t.Fatal(err)
	}
	rs, err := OpenForResume(dir, testManifest(testLayout).Args)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rs.Removed, []string{unrecorded}) {
		t.Fatalf("removed %v, want [%s]", rs.Removed, unrecorded)
	}
	if _, err := os.Stat(filepath.Join(dir, unrecorded)); !os.IsNotExist(err) {
		t.Fatalf("%s still exists", unrecorded)
	}
	finishResume(t, dir, rs, all)
}

func TestResumeOfEmptyCapture(t *testing.T) {
	dir := t.TempDir()
	if _, err := Create(dir, testManifest(testLayout), ShardOptions{}); err != nil {
		t.Fatal(err)
	}
	rs, err := OpenForResume(dir, testManifest(testLayout).Args)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Done) != 0 || rs.NextShard != 0 {
		t.Fatalf("empty capture: %d done, next shard %d", len(rs.Done), rs.NextShard)
	}
	finishResume(t, dir, rs, idRange(0, 10))
}

func TestCorruptShardIsNamed(t *testing.T) {
	dir := t.TempDir()
	writeCapture(t, dir, testLayout, ShardOptions{MaxRows: 40}, idRange(0, 30))
	victim := filepath.Join(dir, ShardFileName(1))
	b, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(victim, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{"Verify": Verify(dir), "OpenForResume": resumeErr(dir)} {
		if err == nil || !strings.Contains(err.Error(), "shard-00001.arrow") || !strings.Contains(err.Error(), "SHA-256") {
			t.Fatalf("%s on a corrupted shard: %v", name, err)
		}
	}
	if err := os.WriteFile(victim, b[:len(b)-8], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Verify(dir); err == nil || !strings.Contains(err.Error(), "shard-00001.arrow is") || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("Verify on a truncated shard: %v", err)
	}
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	if err := Verify(dir); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Verify on a missing shard: %v", err)
	}
	if _, err := OpenDataset(dir); err == nil || !strings.Contains(err.Error(), "shard-00001.arrow") {
		t.Fatalf("OpenDataset on a missing shard: %v", err)
	}
}

func resumeErr(dir string) error {
	_, err := OpenForResume(dir, testManifest(testLayout).Args)
	return err
}

func TestResumeRefusesChangedArguments(t *testing.T) {
	dir := t.TempDir()
	interrupted(t, dir, idRange(0, 27))
	args := testManifest(testLayout).Args
	args["dtype"] = "float32"
	args["seed"] = "43"
	delete(args, "layers")
	args["temperature"] = "0.5"
	_, err := OpenForResume(dir, args)
	if err == nil {
		t.Fatal("changed arguments accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		`dtype: was "float16", now "float32"`,
		`layers: was "0,2,3", now (not set)`,
		`seed: was "42", now "43"`,
		`temperature: was (not set), now "0.5"`,
		"4 argument(s) differ", dir,
	} {
		if !strings.Contains(msg, want) {
			t.Fatalf("message does not contain %q:\n%s", want, msg)
		}
	}
	// Nothing was deleted by the refused resume.
	if tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmps) != 1 {
		t.Fatalf("refused resume touched the directory: %v", tmps)
	}
}

func TestManifestAtomicReplace(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, testManifest(testLayout), ShardOptions{MaxRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	// A stale temporary file from an earlier crash does not get in the way.
	if err := os.WriteFile(filepath.Join(dir, "manifest.json.tmp"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	prev := -1
	for _, id := range idRange(0, 20) {
		if err := w.Write(makeSample(id, sampleLen(id), testLayout)); err != nil {
			t.Fatal(err)
		}
		// After every write the manifest on disk is complete JSON listing every finished shard.
		m, err := ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Shards) != len(w.sw.Shards()) || len(m.Shards) < prev {
			t.Fatalf("manifest lists %d shards, writer finished %d", len(m.Shards), len(w.sw.Shards()))
		}
		prev = len(m.Shards)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "manifest.json.tmp")); !os.IsNotExist(err) {
		t.Fatal("manifest.json.tmp left behind")
	}
	// A manifest whose totals disagree with its shards is refused.
	// (The edit drops the checksum, as in a manifest from before checksums:
	// the totals are still checked.)
	testutil.EditJSON(t, filepath.Join(dir, ManifestName), func(m map[string]any) {
		m["totals"].(map[string]any)["rows"] = 1.0
		delete(m, "sha256")
	})
	if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), "totals") {
		t.Fatalf("tampered totals: %v", err)
	}
}

// A manifest's columns must be its layers' and final_norm's, name for name:
// two names run together are not the same columns, though they print alike.
func TestManifestColumnsCompared(t *testing.T) {
	l := Layout{Layers: []int{0, 2}, FinalNorm: true, Hidden: 4, DType: Float32}
	dir := t.TempDir()
	writeCapture(t, dir, l, ShardOptions{}, idRange(0, 2))
	if _, err := ReadManifest(dir); err != nil {
		t.Fatal(err)
	}
	testutil.EditJSON(t, filepath.Join(dir, ManifestName), func(m map[string]any) {
		m["columns"] = []string{"hidden_0 hidden_2", "final_norm"}
		delete(m, "sha256") // as before checksums: the columns are still checked
	})
	if _, err := ReadManifest(dir); err == nil || !strings.Contains(err.Error(), "do not match layers") {
		t.Fatalf("columns [hidden_0 hidden_2, final_norm] for layers 0,2: %v, want an error", err)
	}
}
