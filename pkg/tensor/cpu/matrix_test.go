package cpu_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// TestMatrix: a 16-bit Matrix's rows and widened copy are its values
// widened, its few-row and many-row products those of the float32 matrix of
// the widened values within float32 rounding (the kernels sum in other
// orders; a bfloat16 MulT on the inputs rounded to bfloat16 where
// RoundsBF16Activations), row ranges view the same values, and a float32 Matrix hands out
// its own slice.
func TestMatrix(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n, k, m = 70, 45, 50
	w, bf, hf := benchWeights(r, n, k)
	x := make([]float32, m*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	f := tensor.F32Matrix(w, n, k)
	if &f.Float32()[0] != &w[0] || f.Bytes() != 4*n*k {
		t.Fatal("a float32 Matrix's Float32 is not its own slice, or its size is wrong")
	}
	for _, c := range []struct {
		dt  tensor.DType
		u   []uint16
		wid func([]float32, []uint16)
	}{{tensor.BF16, bf, tensor.BF16ToF32}, {tensor.F16, hf, tensor.F16ToF32}} {
		a := tensor.HalfMatrix(c.dt, c.u, n, k)
		want := make([]float32, n*k)
		c.wid(want, c.u)
		if got := a.Float32(); !slices.Equal(got, want) || a.Bytes() != 2*n*k {
			t.Fatalf("%s: Float32 is not the widened values, or the size is wrong", c.dt)
		}
		row := make([]float32, k)
		a.Row(row, 7)
		if !slices.Equal(row, want[7*k:8*k]) {
			t.Fatalf("%s: Row 7 is not the widened row", c.dt)
		}
		sub := a.RowRange(3, 9)
		sub.Row(row, 4)
		if sub.Rows != 6 || !slices.Equal(row, want[7*k:8*k]) {
			t.Fatalf("%s: RowRange(3, 9) row 4 is not row 7", c.dt)
		}
		ref := tensor.F32Matrix(want, n, k)
		for _, rows := range []int{1, 5, m} {
			got, exp := make([]float32, rows*n), make([]float32, rows*n)
			cpu.MatrixDotRows(a, got, n, x, k, rows, false)
			cpu.MatrixDotRows(ref, exp, n, x, k, rows, false)
			checkClose(t, c.dt.String()+" DotRows", got, exp)
			clear(got)
			cpu.MatrixMulT(a, cpu.DefaultBackend(), got, n, x, k, rows, 0)
			if c.dt == tensor.BF16 && cpu.RoundsBF16Activations() {
				// GemmBF16 rounds x to bfloat16 first.
				cpu.MatrixDotRows(ref, exp, n, roundedBF16(x), k, rows, false)
			}
			checkClose(t, c.dt.String()+" MulT", got, exp)
		}
	}
}

// roundedBF16 returns x rounded to bfloat16 (nearest, ties to even) and
// widened back: the activations GemmBF16 multiplies where
// RoundsBF16Activations.
func roundedBF16(x []float32) []float32 {
	h := make([]uint16, len(x))
	tensor.F32ToBF16(h, x)
	out := make([]float32, len(x))
	tensor.BF16ToF32(out, h)
	return out
}

// checkClose fails unless got is within float32 rounding of want.
func checkClose(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("%s: element %d is %g, want %g", what, i, got[i], want[i])
		}
	}
}
