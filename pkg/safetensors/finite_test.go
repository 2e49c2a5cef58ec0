package safetensors

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// TestFirstNonFinite puts NaN, +Inf and -Inf at chosen places of F32, BF16 and F16
// tensors, small and large enough to be split over the processors, and checks that the
// scan finds the first, also when the data is not aligned for the in-place view; the
// largest finite values and subnormals pass.
func TestFirstNonFinite(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	for _, dt := range []DType{F32, BF16, F16} {
		big := map[DType]float32{F32: math.MaxFloat32, BF16: math.Float32frombits(0x7f7f0000), F16: 65504}[dt] // largest finite
		for _, n := range []int{1, 7, 3*finiteChunk + 5} {
			vals := make([]float32, n)
			for i := range vals {
				vals[i] = float32(i%13) - 6
			}
			vals[0], vals[n-1] = big, -big
			if n > 2 {
				vals[1] = 1e-40 // subnormal in F32, zero after rounding in the halves
			}
			enc := func() Tensor {
				tt, err := FloatTensor("w", dt, []int{n}, vals)
				if err != nil {
					t.Fatal(err)
				}
				return tt
			}
			if i := FirstNonFinite(dt, enc().Data); i != -1 {
				t.Fatalf("%s n=%d: finite data reported non-finite at %d", dt, n, i)
			}
			for _, pos := range []int{n - 1, n / 2, 0} {
				for _, bad := range []float32{nan, inf, -inf} {
					saved := vals[pos]
					vals[pos] = bad
					data := enc().Data
					if i := FirstNonFinite(dt, data); i != pos {
						t.Fatalf("%s n=%d: %v at %d found at %d", dt, n, bad, pos, i)
					}
					// The same bytes one byte off alignment take the byte-wise path.
					shifted := append([]byte{0}, data...)[1:]
					if i := FirstNonFinite(dt, shifted); i != pos {
						t.Fatalf("%s n=%d unaligned: %v at %d found at %d", dt, n, bad, pos, i)
					}
					vals[pos] = saved
				}
			}
			if n > 2*finiteChunk { // two bad values in different chunks: the first wins
				vals[n-2], vals[finiteChunk+3] = nan, inf
				if i := FirstNonFinite(dt, enc().Data); i != finiteChunk+3 {
					t.Fatalf("%s: two bad values, first found at %d", dt, i)
				}
				vals[n-2], vals[finiteChunk+3] = 0, 0
			}
		}
	}
	if i := FirstNonFinite(I64, make([]byte, 16)); i != -1 {
		t.Fatalf("integer tensor scanned: %d", i)
	}
}

// TestF16OverflowIsNonFinite: a finite float32 beyond the half range becomes infinity
// when written as F16, which the check on the encoded tensor catches.
func TestF16OverflowIsNonFinite(t *testing.T) {
	tt := F16Tensor("blocks.0.layers.0.weight", []int{2, 2}, []float32{1, 2, 70000, 3})
	err := tt.CheckFinite()
	var nf *NonFiniteError
	if !errors.As(err, &nf) || nf.Index != 2 || !math.IsInf(float64(nf.Value), 1) {
		t.Fatalf("overflowing F16 value: %v", err)
	}
	testutil.WantErr(t, err, `"blocks.0.layers.0.weight"`, "+Inf", "element 2", "(F16 [2, 2])", "index [1, 0]")
}

// TestReadFinite checks the file, tensor and index in the error of each refusal.
func TestReadFinite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.safetensors")
	vals := []float32{0, 1, 2, 3, 4, 5}
	vals[4] = float32(math.NaN())
	err := WriteFile(path, []Tensor{
		BF16Tensor("bad", []int{2, 3}, vals),
		F32Tensor("good", []int{2, 3}, []float32{1, 2, 3, 4, 5, 6}),
		I64Tensor("ids", []int{2}, []int64{1, 2}),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dst := make([]float32, 6)
	if err := s.ReadFinite("good", []int{2, 3}, dst); err != nil || dst[5] != 6 {
		t.Fatalf("good tensor: %v %v", err, dst)
	}
	err = s.ReadFinite("bad", []int{2, 3}, dst)
	var nf *NonFiniteError
	if !errors.As(err, &nf) || nf.File != path || nf.Index != 4 {
		t.Fatalf("NaN tensor: %v", err)
	}
	testutil.WantErr(t, err, path, `"bad"`, "NaN", "element 4", "index [1, 1]")
	testutil.WantErr(t, s.ReadFinite("good", []int{3, 2}, dst), path, `"good"`, "shape [2, 3], want [3, 2]")
	testutil.WantErr(t, s.ReadFinite("ids", []int{2}, dst[:2]), path, `"ids"`, "dtype I64")
	testutil.WantErr(t, s.ReadFinite("absent", []int{2}, dst[:2]), `"absent"`, path)
	if err := s.CheckFinite("ids"); err != nil {
		t.Fatalf("integer tensor: %v", err)
	}
}

// BenchmarkFirstNonFinite scans 64 MiB of finite weights (the whole scan).
func BenchmarkFirstNonFinite(b *testing.B) {
	for _, dt := range []DType{BF16, F32} {
		b.Run(string(dt), func(b *testing.B) {
			data := make([]byte, 64<<20)
			for i := range data {
				data[i] = byte(i*7) & 0x3f // no byte sets the exponent's top bits: all finite
			}
			if i := FirstNonFinite(dt, data); i >= 0 {
				b.Fatalf("benchmark data non-finite at %d", i)
			}
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				FirstNonFinite(dt, data)
			}
		})
	}
}
