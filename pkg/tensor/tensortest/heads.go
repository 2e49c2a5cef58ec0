package tensortest

import (
	"fmt"
	"math"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The checks of HeadMatMul, the per-head products of DeepSeek-V3's absorbed
// multi-head latent attention, against their definition in float64: head h's
// block of x's columns times rows [h·a, (h+1)·a) of w (or their transpose)
// into head h's block of out's columns.

// headMatMulRef returns HeadMatMul's float64 result [rows, heads·n] and the
// sum of its terms' magnitudes, the scale of each value's float32 rounding.
func headMatMulRef(x, w []float32, rows, heads, a, b int, transW bool) (want, scale []float64) {
	k, n := a, b
	if transW {
		k, n = b, a
	}
	want, scale = make([]float64, rows*heads*n), make([]float64, rows*heads*n)
	for r := 0; r < rows; r++ {
		for h := 0; h < heads; h++ {
			for j := 0; j < n; j++ {
				var s, sa float64
				for c := 0; c < k; c++ {
					var wv float32
					if transW {
						wv = w[(h*a+j)*b+c] // W_hᵀ[c, j]
					} else {
						wv = w[(h*a+c)*b+j] // W_h[c, j]
					}
					p := float64(x[r*heads*k+h*k+c]) * float64(wv)
					s += p
					sa += math.Abs(p)
				}
				want[(r*heads+h)*n+j], scale[(r*heads+h)*n+j] = s, sa
			}
		}
	}
	return want, scale
}

// headMatMulCase is one shape: heads blocks of an a x b weight, rows rows.
type headMatMulCase struct{ heads, a, b, rows int }

// headMatMul checks HeadMatMul against headMatMulRef, both ways round, from
// one head to sixteen, from one row to past FewRows (the CPU's few-row
// kernels and its backend, one batched call per row and one for all on
// CUDA); that out's rows past x's stay as they were; that a view of x rows
// into a larger tensor reads from its place; that up to FewRows rows each
// row's result is the one it gets alone, bit for bit; then that each
// programming error panics.
func headMatMul(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 50)
	for _, c := range []headMatMulCase{
		{1, 7, 5, 1},
		{3, 16, 24, 1},
		{3, 16, 24, 2},
		{8, 12, 33, 5},
		{16, 24, 40, 3},
		{4, 64, 96, tensor.FewRows},
		{2, 9, 70, tensor.FewRows + 1},
		{16, 24, 40, 100},
		{5, 40, 17, 130},
	} {
		for _, transW := range []bool{false, true} {
			k, n := c.a, c.b
			if transW {
				k, n = c.b, c.a
			}
			name := fmt.Sprintf("HeadMatMul of %d rows, %d heads of %dx%d (transposed %v)", c.rows, c.heads, c.a, c.b, transW)
			xv, wv := e.rand((c.rows+1)*c.heads*k, 1), e.rand(c.heads*c.a*c.b, 1)
			// x is rows 1.. of a larger tensor; out has a row more than x.
			x := e.tensor(xv, c.rows+1, c.heads*k).RowRange(1, c.rows+1)
			w := e.tensor(wv, c.heads*c.a, c.b)
			ov := e.rand((c.rows+1)*c.heads*n, 1)
			out := e.tensor(ov, c.rows+1, c.heads*n)
			dev.HeadMatMul(out, x, w, c.heads, transW)
			got := e.read(out)
			want, scale := headMatMulRef(xv[c.heads*k:], wv, c.rows, c.heads, c.a, c.b, transW)
			e.near(name, got[:c.rows*c.heads*n], want, scale)
			e.same(name+": the row past x's", got[c.rows*c.heads*n:], ov[c.rows*c.heads*n:])
			if c.rows > tensor.FewRows || c.rows == 1 {
				continue
			}
			// Each row alone gets the same bits.
			one := e.tensor(make([]float32, c.heads*n), 1, c.heads*n)
			for r := 0; r < c.rows; r++ {
				dev.HeadMatMul(one, x.RowRange(r, r+1), w, c.heads, transW)
				e.same(fmt.Sprintf("%s: row %d alone", name, r), e.read(one), got[r*c.heads*n:(r+1)*c.heads*n])
			}
		}
	}
	e.headMatMulPanics()
}

// headMatMulPanics checks that each programming error HeadMatMul rejects
// panics: a dtype other than F32, heads not dividing w's rows or not
// positive, x's or out's columns not heads·k or heads·n, out shorter than x.
func (e *env) headMatMulPanics() {
	x := e.tensor(e.rand(2*3*4, 1), 2, 3*4) // 3 heads of k = 4
	w := e.tensor(e.rand(3*4*5, 1), 3*4, 5) // a = 4, b = 5
	out := e.tensor(e.rand(2*3*5, 1), 2, 3*5)
	ints, err := e.dev.Alloc(tensor.I32, 2, 3*4)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range []struct {
		what        string
		out, x, w   tensor.Tensor
		heads       int
		transW      bool
		expectPanic bool
	}{
		{"a valid call", out, x, w, 3, false, false},
		{"an I32 x", out, ints, w, 3, false, true},
		{"zero heads", out, x, w, 0, false, true},
		{"heads not dividing w's rows", out, x, w, 5, false, true},
		{"transposed, so x's columns are not heads·b", out, x, w, 3, true, true},
		{"out's columns not heads·n", e.tensor(e.rand(2*3*4, 1), 2, 3*4), x, w, 3, false, true},
		{"out shorter than x", out.RowRange(0, 1), x, w, 3, false, true},
	} {
		func() {
			defer func() {
				if p := recover(); (p != nil) != c.expectPanic {
					e.t.Fatalf("HeadMatMul with %s: panic %v, want a panic: %v", c.what, p, c.expectPanic)
				}
			}()
			e.dev.HeadMatMul(c.out, c.x, c.w, c.heads, c.transW)
		}()
	}
}

// headMatMulAllocs checks that HeadMatMul allocates nothing per call once
// warm: few rows and many, both ways round, small and split over the CPU's
// workers.
func headMatMulAllocs(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 51)
	type call struct {
		out, x, w tensor.Tensor
		heads     int
		transW    bool
	}
	var calls []call
	for _, c := range []headMatMulCase{{4, 8, 12, 1}, {16, 32, 64, 5}, {8, 16, 24, 60}, {16, 64, 64, 2}} {
		for _, transW := range []bool{false, true} {
			k, n := c.a, c.b
			if transW {
				k, n = c.b, c.a
			}
			calls = append(calls, call{e.tensor(make([]float32, c.rows*c.heads*n), c.rows, c.heads*n),
				e.tensor(e.rand(c.rows*c.heads*k, 1), c.rows, c.heads*k), e.tensor(e.rand(c.heads*c.a*c.b, 1), c.heads*c.a, c.b),
				c.heads, transW})
		}
	}
	run := func() {
		for _, c := range calls {
			dev.HeadMatMul(c.out, c.x, c.w, c.heads, c.transW)
		}
	}
	run() // grow the scratch
	if a := testing.AllocsPerRun(5, run); a != 0 {
		t.Fatalf("%v allocations per run of HeadMatMul, want 0", a)
	}
}
