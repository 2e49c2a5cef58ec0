package train

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/x448/float16"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/outlock"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// noStepTaken fails the test when out holds anything a training step writes.
func noStepTaken(t *testing.T, out string) {
	t.Helper()
	for _, f := range []string{"metrics.jsonl", CheckpointFile, ProvenanceFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err == nil {
			t.Errorf("%s was written: training started on bad data", f)
		}
	}
}

// Zeroed rows (plausible states, no error when read) are refused by train
// before any step, without --verify-data: the shard no longer has the
// SHA-256 its manifest records.
func TestTrainRefusesZeroedRows(t *testing.T) {
	fp := modelFingerprint(t)
	dir := filepath.Join(t.TempDir(), "cap")
	writeCapture(t, dir, fp, distil(t, 4), []int{1, 3, 5}, true)
	shard := filepath.Join(dir, capture.ShardFileName(0))
	st, err := os.Stat(shard)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(shard, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(make([]byte, st.Size()/3), st.Size()/3) // the middle third: rows of states
	if cerr := f.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	out := filepath.Join(t.TempDir(), "out")
	_, err = Run(context.Background(), Options{Method: smallMedusa(), Model: modelDir, Data: []string{dir}, Out: out})
	if err == nil || !strings.Contains(err.Error(), shard+" has SHA-256") || !strings.Contains(err.Error(), "corrupted or was modified") {
		t.Fatalf("zeroed rows: %v", err)
	}
	noStepTaken(t, out)
}

// resealShard records the shard's current SHA-256 in the capture's manifest,
// as a tool that wrote the bad values would have.
func resealShard(t *testing.T, dir string, n int) {
	t.Helper()
	m, err := capture.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, m.Shards[n].File))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	m.Shards[n].SHA256 = hex.EncodeToString(sum[:])
	if err := capture.WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
}

// NaN rows in a shard whose checksum matches its manifest are refused before
// any step, naming the shard, row, sample, position and column (they used to
// fail 150 steps later as "training loss became NaN").
func TestTrainRefusesNaNRows(t *testing.T) {
	fp := modelFingerprint(t)
	samples := distil(t, 4)
	// Mark sample 1, position 2 of final_norm with values found nowhere else.
	const H = 64
	var mark []byte
	for e := 0; e < 8; e++ {
		v := float32(1001 + e)
		samples[1].states[finalKey][2*H+e] = v
		mark = binary.LittleEndian.AppendUint16(mark, float16.Fromfloat32(v).Bits())
	}
	dir := filepath.Join(t.TempDir(), "cap")
	writeCapture(t, dir, fp, samples, []int{1, 3, 5}, true)
	shard := filepath.Join(dir, capture.ShardFileName(0))
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, mark)
	if at < 0 || bytes.Index(b[at+1:], mark) >= 0 {
		t.Fatal("the marked state is not in the shard exactly once")
	}
	for r := 0; r < 3; r++ { // NaN in element 0 of three rows: the first is named
		binary.LittleEndian.PutUint16(b[at+r*2*H:], 0x7e00)
	}
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	resealShard(t, dir, 0)
	out := filepath.Join(t.TempDir(), "out")
	_, err = Run(context.Background(), Options{Method: smallMedusa(), Model: modelDir, Data: []string{dir}, Out: out})
	want := fmt.Sprintf("%s row %d (sample 1, position 2), column final_norm, element 0 of %d: NaN", shard, len(samples[0].tokens)+2, H)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("NaN rows: %v\nwant it to name %q", err, want)
	}
	noStepTaken(t, out)
}

// Train verifies every shard once per file identity with a cache: a second
// run reads nothing, Options.VerifyData reads everything again.
func TestTrainVerifyCache(t *testing.T) {
	fp := modelFingerprint(t)
	dir := filepath.Join(t.TempDir(), "cap")
	writeCapture(t, dir, fp, distil(t, 12), []int{1, 3, 5}, true)
	m, err := capture.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := len(m.Shards)
	cache := filecache.New(t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stop at the first step: only the data check matters here
	for i, c := range []struct {
		verify bool
		want   string
	}{
		{false, fmt.Sprintf("data: %d shards verified, %d read (", n, n)},
		{false, fmt.Sprintf("data: %d shards verified, %d unchanged since verified\n", n, n)},
		{true, fmt.Sprintf("data: %d shards verified, %d read (", n, n)},
	} {
		var progress bytes.Buffer
		o := Options{Method: smallMedusa(), Model: modelDir, Data: []string{dir}, Out: filepath.Join(t.TempDir(), "out"),
			Cache: cache, VerifyData: c.verify, Progress: &progress}
		Run(ctx, o)
		if !strings.Contains(progress.String(), c.want) {
			t.Fatalf("run %d (VerifyData %v): progress %q, want %q", i+1, c.verify, progress.String(), c.want)
		}
	}
}

// gate is a progress writer that holds up the run writing to it first until
// the test lets it go.
type gate struct {
	once             sync.Once
	started, proceed chan struct{}
}

func newGate() *gate { return &gate{started: make(chan struct{}), proceed: make(chan struct{})} }

func (g *gate) Write(p []byte) (int, error) {
	g.once.Do(func() { close(g.started); <-g.proceed })
	return len(p), nil
}

// metricSteps returns the "step" of every line of metrics.jsonl.
func metricSteps(t *testing.T, out string) []int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m struct{ Step int }
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("metrics.jsonl line %q: %v", line, err)
		}
		steps = append(steps, m.Step)
	}
	return steps
}

// Two trainings into one --out: the second fails at once naming the first,
// which completes exactly as if it had been alone.
func TestConcurrentTrainsOneOut(t *testing.T) {
	fp := modelFingerprint(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "cap")
	writeCapture(t, dir, fp, distil(t, 12), []int{1, 3, 5}, true)
	opt := Options{Method: smallMedusa(), Model: modelDir, Data: []string{dir}}
	ref := opt
	ref.Out = filepath.Join(tmp, "ref")
	if _, err := Run(context.Background(), ref); err != nil {
		t.Fatal(err)
	}

	first := opt
	first.Out = filepath.Join(tmp, "out")
	g := newGate()
	first.Progress = g
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), first)
		done <- err
	}()
	<-g.started
	second := opt
	second.Out = first.Out
	_, err := Run(context.Background(), second)
	var be *outlock.BusyError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), first.Out+` is in use by "drafter train" (pid `) ||
		!strings.Contains(err.Error(), "wait for it to finish, or use another --out") {
		t.Fatalf("second training into the same --out: %v", err)
	}
	close(g.proceed)
	if err := <-done; err != nil {
		t.Fatalf("first training: %v", err)
	}
	if got, want := metricSteps(t, first.Out), metricSteps(t, ref.Out); !slices.Equal(got, want) {
		t.Fatalf("metrics.jsonl steps %v, want %v as in a training alone", got, want)
	}
	if got, want := sha(t, filepath.Join(first.Out, "vllm", "model.safetensors")), sha(t, filepath.Join(ref.Out, "vllm", "model.safetensors")); got != want {
		t.Fatal("the exported heads differ from a training alone")
	}
	if _, err := os.Stat(filepath.Join(first.Out, outlock.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file left after the training: %v", err)
	}
}

// A training checkpoint with 400 changed bytes is refused on --resume,
// naming the file and what to do, instead of training on (and exporting) the
// damaged weights; the untouched copy resumes.
func TestResumeRefusesDamagedCheckpoint(t *testing.T) {
	fp := modelFingerprint(t)
	dir := filepath.Join(t.TempDir(), "cap")
	writeCapture(t, dir, fp, distil(t, 12), []int{1, 3, 5}, true)
	o := Options{Method: smallMedusa(), Model: modelDir, Data: []string{dir}, Out: filepath.Join(t.TempDir(), "out")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o.Progress = &cancelOn{text: "eval ", cancel: cancel}
	if _, err := Run(ctx, o); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	ckpt := filepath.Join(o.Out, CheckpointFile)
	good, err := os.ReadFile(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	start := 8 + int(binary.LittleEndian.Uint64(bad[:8]))
	for i := start + 1000; i < start+1400; i++ {
		bad[i] = 0x7f // 0x7f7f7f7f is 3.4e38
	}
	if err := os.WriteFile(ckpt, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	o.Progress, o.Resume = nil, true
	_, err = Run(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), ckpt+" is damaged") || !strings.Contains(err.Error(), "delete it to start the run over") {
		t.Fatalf("resume from a damaged checkpoint: %v", err)
	}
	if _, err := os.Stat(filepath.Join(o.Out, "vllm")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a drafter was exported from the damaged checkpoint")
	}
	// The untouched checkpoint, as an older drafter wrote it (no checksum),
	// resumes with a note.
	if err := os.WriteFile(ckpt, good, 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := safetensors.Open(ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Metadata()["sha256"]; !ok {
		t.Fatal("the checkpoint records no sha256")
	}
	md := map[string]string{}
	for k, v := range set.Metadata() {
		if k != "sha256" {
			md[k] = v
		}
	}
	var ts []safetensors.Tensor
	for _, n := range set.Names() {
		raw, info, _ := set.Raw(n)
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
	}
	set.Close()
	if err := safetensors.WriteFile(ckpt, ts, md); err != nil {
		t.Fatal(err)
	}
	// Quiet (no progress writer): the note still reaches Notes.
	var notes bytes.Buffer
	o.Progress, o.Notes = nil, &notes
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatalf("resume from the untouched checkpoint without checksum: %v", err)
	}
	if !strings.Contains(notes.String(), "note: "+ckpt+" was written by an older drafter and has no checksum") {
		t.Fatalf("no note about the missing checksum in %q", notes.String())
	}
}
