package capture

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/filecache"
)

// stateAt locates element elem of state column col, row row of record batch batch of
// shard n of the capture in dir: it returns the byte offset in the file, and the shard
// row, sample id and position of that row.
func stateAt(t *testing.T, dir string, m *Manifest, n, batch, col, row, elem int) (off, shardRow int, id int64, pos int32) {
	t.Helper()
	sh, err := openShard(dir, m.Shards[n], m.Layout())
	if err != nil {
		t.Fatal(err)
	}
	defer sh.close()
	for _, b := range sh.batches[:batch] {
		shardRow += len(b.ids)
	}
	b := sh.batches[batch]
	st := b.states[col]
	base := int(uintptr(unsafe.Pointer(&st[0])) - uintptr(unsafe.Pointer(&sh.data[0])))
	es := m.DType.Size()
	return base + (row*m.HiddenSize+elem)*es, shardRow + row, b.ids[row], b.pos[row]
}

// reseal records shard n's current size and SHA-256 in the manifest, as if the file had
// been written that way.
func reseal(t *testing.T, dir string, m *Manifest, n int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, m.Shards[n].File))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	m.Shards[n].SHA256, m.Shards[n].Bytes = hex.EncodeToString(sum[:]), int64(len(b))
	if err := writeManifest(dir, m); err != nil {
		t.Fatal(err)
	}
}

func patchFile(t *testing.T, path string, fn func(b []byte)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fn(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Rows of zeros in a shard, which read back as plausible states, are refused
// before any sample is read: the file no longer has its recorded SHA-256.
func TestVerifyRefusesZeroedRows(t *testing.T) {
	dir := t.TempDir()
	m := writeCapture(t, dir, testLayout, ShardOptions{MaxRows: 40}, idRange(0, 30))
	off, _, _, _ := stateAt(t, dir, m, 1, 0, 1, 0, 0)
	patchFile(t, filepath.Join(dir, ShardFileName(1)), func(b []byte) {
		clear(b[off : off+20*testLayout.Hidden*2]) // 20 rows of hidden_2
	})
	for name, err := range map[string]error{"Verify": Verify(dir), "OpenDataset": openErr(DatasetOptions{}, dir), "OpenForResume": resumeErr(dir)} {
		if err == nil || !strings.Contains(err.Error(), ShardFileName(1)+" has SHA-256") || !strings.Contains(err.Error(), "corrupted or was modified") {
			t.Errorf("%s on zeroed rows: %v", name, err)
		}
	}
	// Unverified, the zeros would be read as states.
	if err := openErr(DatasetOptions{SkipVerify: true}, dir); err != nil {
		t.Fatalf("SkipVerify: %v", err)
	}
}

func openErr(opt DatasetOptions, dirs ...string) error {
	ds, err := OpenDatasetWith(opt, dirs...)
	if err == nil {
		ds.Close()
	}
	return err
}

// A NaN or an infinity stored in a shard whose checksum matches its manifest
// (written by another tool, or shard and manifest changed together) is
// refused by name: file, shard row, sample, position, column, element, kind.
func TestVerifyRefusesNonFiniteStates(t *testing.T) {
	for _, c := range []struct {
		dtype     DType
		col, elem int
		bits      uint32
		kind      string
	}{
		{Float16, 2, 5, 0x7e00, "NaN"},
		{Float16, 3, 0, 0xfc00, "-Inf"},
		{Float32, 3, 23, 0x7f800000, "+Inf"},
		{Float32, 0, 7, 0xffc00001, "NaN"},
	} {
		t.Run(fmt.Sprintf("%s-%s", c.dtype, c.kind), func(t *testing.T) {
			l := testLayout
			l.DType = c.dtype
			dir := t.TempDir()
			m := writeCapture(t, dir, l, ShardOptions{MaxRows: 40, BatchBytes: 4 << 10}, idRange(0, 30))
			off, row, id, pos := stateAt(t, dir, m, 1, 1, c.col, 3, c.elem)
			later, _, _, _ := stateAt(t, dir, m, 1, 1, c.col, 4, 0)
			patchFile(t, filepath.Join(dir, ShardFileName(1)), func(b []byte) {
				for _, at := range []int{off, later} {
					if c.dtype == Float16 {
						binary.LittleEndian.PutUint16(b[at:], uint16(c.bits))
					} else {
						binary.LittleEndian.PutUint32(b[at:], c.bits)
					}
				}
			})
			reseal(t, dir, m, 1)
			want := fmt.Sprintf("%s row %d (sample %d, position %d), column %s, element %d of %d: %s.",
				ShardFileName(1), row, id, pos, l.Columns()[c.col], c.elem, l.Hidden, c.kind)
			for name, err := range map[string]error{"Verify": Verify(dir), "OpenDataset": openErr(DatasetOptions{}, dir)} {
				if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "capture again") {
					t.Errorf("%s: %v\nwant it to name %q", name, err, want)
				}
			}
		})
	}
}

// A verified shard is not read again while its file keeps its identity; a
// shard written again is, and damage done after caching is found.
func TestVerifyCache(t *testing.T) {
	dir := t.TempDir()
	m := writeCapture(t, dir, testLayout, ShardOptions{MaxRows: 40}, idRange(0, 30))
	n := len(m.Shards)
	if n < 3 {
		t.Fatalf("%d shards; the test needs several", n)
	}
	cache := filecache.New(t.TempDir())
	stats := func(opt DatasetOptions) VerifyStats {
		t.Helper()
		opt.Cache = cache
		ds, err := OpenDatasetWith(opt, dir)
		if err != nil {
			t.Fatal(err)
		}
		defer ds.Close()
		checkDataset(t, ds, testLayout, idRange(0, 30))
		return ds.Verified()
	}
	if got, want := stats(DatasetOptions{}), (VerifyStats{Shards: n, Read: n, Bytes: m.Totals.Bytes}); got != want {
		t.Fatalf("first open: %+v, want %+v", got, want)
	}
	if got, want := stats(DatasetOptions{}), (VerifyStats{Shards: n, Cached: n}); got != want {
		t.Fatalf("second open: %+v, want %+v (every shard from the cache)", got, want)
	}
	if got, want := stats(DatasetOptions{Recheck: true}), (VerifyStats{Shards: n, Read: n, Bytes: m.Totals.Bytes}); got != want {
		t.Fatalf("Recheck: %+v, want %+v", got, want)
	}
	if got := stats(DatasetOptions{SkipVerify: true}); got != (VerifyStats{}) {
		t.Fatalf("SkipVerify: %+v", got)
	}

	// The same bytes written again: read again.
	patchFile(t, filepath.Join(dir, ShardFileName(1)), func([]byte) {})
	if got, want := stats(DatasetOptions{}), (VerifyStats{Shards: n, Read: 1, Cached: n - 1, Bytes: m.Shards[1].Bytes}); got != want {
		t.Fatalf("after rewriting shard 1: %+v, want %+v", got, want)
	}
	// Damage after caching, modification time kept: found.
	path := filepath.Join(dir, ShardFileName(2))
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	patchFile(t, path, func(b []byte) { b[len(b)/2] ^= 1 })
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := openErr(DatasetOptions{Cache: cache}, dir); err == nil || !strings.Contains(err.Error(), ShardFileName(2)+" has SHA-256") {
		t.Fatalf("shard damaged after caching: %v", err)
	}
}

// With several damaged shards, the first one in manifest order is reported,
// whichever the parallel verification finishes first.
func TestVerifyReportsFirstDamagedShard(t *testing.T) {
	dir := t.TempDir()
	m := writeCapture(t, dir, testLayout, ShardOptions{MaxRows: 20}, idRange(0, 40))
	if len(m.Shards) < 6 {
		t.Fatalf("%d shards; the test needs more", len(m.Shards))
	}
	for _, n := range []int{2, 4, 5} {
		patchFile(t, filepath.Join(dir, ShardFileName(n)), func(b []byte) { b[len(b)/2] ^= 0x55 })
	}
	for i := 0; i < 20; i++ {
		if err := Verify(dir); err == nil || !strings.Contains(err.Error(), ShardFileName(2)) {
			t.Fatalf("run %d: %v, want shard 2 named", i, err)
		}
	}
}

// Random damage anywhere in a shard, the Arrow metadata included (on which
// arrow-go can panic or exhaust memory), is reported as a checksum mismatch:
// the bytes are verified before they are parsed.
func TestVerifyBeforeParsing(t *testing.T) {
	dir := t.TempDir()
	m := writeCapture(t, dir, testLayout, ShardOptions{MaxRows: 40}, idRange(0, 10))
	path := filepath.Join(dir, m.Shards[0].File)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	for k := 0; k < 300; k++ {
		b := append([]byte(nil), orig...)
		for j := 0; j < 4; j++ {
			b[rng.Intn(len(b))] ^= byte(1 + rng.Intn(255))
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := openErr(DatasetOptions{}, dir); err == nil || !strings.Contains(err.Error(), "SHA-256") {
			t.Fatalf("damage %d: %v", k, err)
		}
	}
}

// BenchmarkVerify measures verifying a float16 capture of 8 shards of 32 MiB
// (SHA-256 and the finiteness scan, both cores), read from the page cache, and
// the same open when the cache vouches for every shard. MB/s counts file bytes.
func BenchmarkVerify(b *testing.B) {
	dir := b.TempDir()
	w, err := Create(dir, testManifest(benchLayout), ShardOptions{MaxBytes: 32 << 20})
	if err != nil {
		b.Fatal(err)
	}
	s := benchSample(1, benchLayout)
	for i := 0; i < 64; i++ {
		s.ID = int64(i)
		if err := w.Write(s); err != nil {
			b.Fatal(err)
		}
	}
	m, err := w.Close()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opt  DatasetOptions
	}{
		{"first", DatasetOptions{}},
		{"cached", DatasetOptions{Cache: filecache.New(b.TempDir())}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.opt.Cache != nil {
				if err := openErr(c.opt, dir); err != nil { // fill the cache
					b.Fatal(err)
				}
			}
			b.SetBytes(m.Totals.Bytes)
			for b.Loop() {
				ds, err := OpenDatasetWith(c.opt, dir)
				if err != nil {
					b.Fatal(err)
				}
				st := ds.Verified()
				ds.Close()
				if c.opt.Cache != nil && st.Read != 0 {
					b.Fatalf("cached open read %d shards", st.Read)
				}
			}
			b.ReportMetric(float64(len(m.Shards)), "shards")
		})
	}
}
