package run

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/x448/float16"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/pkg/filecache"
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
	fp := fingerprint(t)
	dir := filepath.Join(t.TempDir(), "cap")
	writeCapture(t, dir, fp, distil(t, 4), []int{1, 3, 5}, true)
	shard := filepath.Join(dir, capture.ShardFileName(0))
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	clear(b[len(b)/3 : 2*len(b)/3])
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	_, err = Run(context.Background(), Options{Method: MethodMedusa, Model: modelDir, Data: []string{dir}, Out: out, Medusa: smallMedusa()})
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
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, capture.ManifestName), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// NaN rows in a shard whose checksum matches its manifest are refused before
// any step, naming the shard, row, sample, position and column (they used to
// fail 150 steps later as "training loss became NaN").
func TestTrainRefusesNaNRows(t *testing.T) {
	fp := fingerprint(t)
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
	_, err = Run(context.Background(), Options{Method: MethodMedusa, Model: modelDir, Data: []string{dir}, Out: out, Medusa: smallMedusa()})
	want := fmt.Sprintf("%s row %d (sample 1, position 2), column final_norm, element 0 of %d: NaN", shard, len(samples[0].tokens)+2, H)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("NaN rows: %v\nwant it to name %q", err, want)
	}
	noStepTaken(t, out)
}

// Train verifies every shard once per file identity with a cache: a second
// run reads nothing, Options.VerifyData reads everything again.
func TestTrainVerifyCache(t *testing.T) {
	fp := fingerprint(t)
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
		o := Options{Method: MethodMedusa, Model: modelDir, Data: []string{dir}, Out: filepath.Join(t.TempDir(), "out"),
			Medusa: smallMedusa(), Cache: cache, VerifyData: c.verify, Progress: &progress}
		Run(ctx, o)
		if !strings.Contains(progress.String(), c.want) {
			t.Fatalf("run %d (VerifyData %v): progress %q, want %q", i+1, c.verify, progress.String(), c.want)
		}
	}
}
