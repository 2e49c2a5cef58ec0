package capture

import (
	"math/rand"
	"testing"
)

// benchLayout: 3 layers plus the final norm, hidden 512, float16.
var benchLayout = Layout{Layers: []int{1, 4, 7}, FinalNorm: true, Hidden: 512, DType: Float16}

const benchT = 512

func benchSample(id int64, l Layout) Sample {
	rng := rand.New(rand.NewSource(id))
	s := Sample{ID: id, Tokens: make([]int32, benchT), LossMask: make([]bool, benchT)}
	for t := range s.Tokens {
		s.Tokens[t] = int32(rng.Intn(32000))
		s.LossMask[t] = t > benchT/4
	}
	for range l.Columns() {
		st := make([]float32, benchT*l.Hidden)
		for i := range st {
			st[i] = float32(rng.NormFloat64())
		}
		s.States = append(s.States, st)
	}
	return s
}

// BenchmarkWriteF16 measures writing samples of 512 tokens (3 layers + final norm, H=512,
// float16) to shards of 256 MiB, fsyncs included. MB/s counts stored state bytes.
func BenchmarkWriteF16(b *testing.B) {
	s := benchSample(1, benchLayout)
	w, err := Create(b.TempDir(), testManifest(benchLayout), ShardOptions{MaxBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(benchT * benchLayout.Hidden * 2 * len(s.States)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.ID = int64(i)
		if err := w.Write(s); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*benchT)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkEncodeF16 measures the float32 -> float16 conversion alone (one column of one sample).
func BenchmarkEncodeF16(b *testing.B) {
	src := benchSample(1, benchLayout).States[0]
	dst := make([]byte, 2*len(src))
	b.SetBytes(int64(2 * len(src)))
	for i := 0; i < b.N; i++ {
		encodeStates(dst, src, Float16)
	}
}

// BenchmarkReadMmap measures reading every sample and every state column, converted to
// float32, from memory-mapped float16 shards. MB/s counts stored state bytes.
func BenchmarkReadMmap(b *testing.B) {
	dir := b.TempDir()
	w, err := Create(dir, testManifest(benchLayout), ShardOptions{MaxBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	s := benchSample(1, benchLayout)
	const n = 48
	for i := 0; i < n; i++ {
		s.ID = int64(i)
		if err := w.Write(s); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		b.Fatal(err)
	}
	ds := openDataset(b, dir)
	cols := []int{0, 1, 2, 3}
	var buf SampleBuf
	b.SetBytes(int64(n * benchT * benchLayout.Hidden * 2 * len(cols)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < ds.NumSamples(); j++ {
			ds.ReadSample(j, cols, &buf)
		}
	}
	b.ReportMetric(float64(b.N*n*benchT)/b.Elapsed().Seconds(), "rows/s")
}
