package capture

import (
	"math"
	"testing"
)

// TestReadLargeStatesAllocationFree reads samples whose states are large enough
// to be converted over the cores (and one small enough to be converted in
// place), checks every value against the original, and checks that, with the
// caller's buffers already sized, no read allocates.
func TestReadLargeStatesAllocationFree(t *testing.T) {
	for _, dt := range []DType{Float16, Float32} {
		t.Run(string(dt), func(t *testing.T) {
			l := Layout{Layers: []int{1}, FinalNorm: true, Hidden: 512, DType: dt}
			dir := t.TempDir()
			w, err := Create(dir, testManifest(l), ShardOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lens := []int{300, 3} // 153600 values: over the cores; 1536: in place
			var samples []Sample
			for i, T := range lens {
				s := makeSample(int64(i), T, l)
				samples = append(samples, s)
				if err := w.Write(s); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := w.Close(); err != nil {
				t.Fatal(err)
			}
			ds := openDataset(t, dir)
			if 2*convertChunk > lens[0]*l.Hidden || 2*convertChunk <= lens[1]*l.Hidden {
				t.Fatalf("sample sizes %v x %d do not straddle the parallel threshold %d", lens, l.Hidden, 2*convertChunk)
			}
			dst := make([]float32, lens[0]*l.Hidden)
			for i := range lens {
				for c := range l.Columns() {
					got := ds.State(i, c, dst)
					for j, v := range samples[i].States[c] {
						if want := stored(v, dt); math.Float32bits(got[j]) != math.Float32bits(want) {
							t.Fatalf("sample %d column %d element %d: read %g, want %g", i, c, j, got[j], want)
						}
					}
					lo, hi := 1, lens[i]-1
					rows := ds.StateRows(i, c, lo, hi, dst)
					for j := range rows {
						if want := stored(samples[i].States[c][lo*l.Hidden+j], dt); math.Float32bits(rows[j]) != math.Float32bits(want) {
							t.Fatalf("sample %d column %d rows [%d,%d) element %d: read %g, want %g", i, c, lo, hi, j, rows[j], want)
						}
					}
				}
			}
			buf := SampleBuf{}
			cols := []int{0, 1}
			ds.ReadSample(0, cols, &buf)
			for i := range lens {
				if a := testing.AllocsPerRun(20, func() {
					dst = ds.State(i, 1, dst)
					ds.ReadSample(i, cols, &buf)
				}); a != 0 {
					t.Errorf("reading sample %d (%d values per state) allocates %v times", i, lens[i]*l.Hidden, a)
				}
			}
		})
	}
}
