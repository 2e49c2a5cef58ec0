package sample

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestSampleRowMatchesSampler: tensor.SampleRow, the rule a device's
// SampleRows follows (the CPU device runs it), fed one uniform drawn from
// the row's stream, returns Sampler.Sample's token bit for bit, at
// temperature 0 and above with no top-k, top-p or min-p, on rows with -Inf
// entries, ties, sharp and flat distributions; both consume the same draws
// from the stream; a row the sampler refuses (NaN, +Inf, only -Inf) gives -1.
func TestSampleRowMatchesSampler(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	const vocab = 700
	row := make([]float32, vocab)
	for _, temp := range []float64{0, 0.05, 0.6, 1, 1.7, 4} {
		s, err := NewSampler(vocab, Params{Temperature: temp})
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 400; k++ {
			scale := []float64{0.1, 1, 8}[k%3]
			for i := range row {
				row[i] = float32(r.NormFloat64() * scale)
			}
			switch k % 7 {
			case 1:
				for i := 0; i < vocab; i += 2 {
					row[i] = float32(math.Inf(-1))
				}
			case 2:
				row[10], row[600] = 100, 100
			case 3:
				row[r.IntN(vocab)] = float32(math.NaN())
			case 4:
				row[r.IntN(vocab)] = float32(math.Inf(1))
			}
			a, b := NewRNG(5, uint64(k)), NewRNG(5, uint64(k))
			want, err := s.Sample(row, a)
			var u float64
			if temp != 0 {
				u = b.Float64()
			}
			got := tensor.SampleRow(row, temp, u)
			if err != nil {
				if got != -1 {
					t.Fatalf("temperature %g row %d: the sampler refused it (%v), SampleRow drew %d", temp, k, err, got)
				}
				continue
			}
			if int(got) != want {
				t.Fatalf("temperature %g row %d: SampleRow drew %d, the sampler %d", temp, k, got, want)
			}
			if a.Uint64() != b.Uint64() {
				t.Fatalf("temperature %g row %d: the streams are at different positions", temp, k)
			}
		}
	}
	for i := range row {
		row[i] = float32(math.Inf(-1))
	}
	if got := tensor.SampleRow(row, 1, 0.5); got != -1 {
		t.Fatalf("a row of -Inf: SampleRow drew %d", got)
	}
}
