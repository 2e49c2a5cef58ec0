package kernel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// refDot is the float64 reference of DotRows.
func refDot(out []float32, ldo int, x, w []float32, m, n, k int, acc bool) []float64 {
	ref := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += float64(x[i*k+p]) * float64(w[j*k+p])
			}
			if acc {
				s += float64(out[i*ldo+j])
			}
			ref[i*n+j] = s
		}
	}
	return ref
}

// check compares got against the float64 reference with a bound scaled by
// the sum of |x||w| (float32 accumulation error grows with it).
func check(t *testing.T, name string, got []float32, ldo int, ref []float64, x, w, out0 []float32, m, n, k int, acc bool) {
	t.Helper()
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var mag float64
			for p := 0; p < k; p++ {
				mag += math.Abs(float64(x[i*k+p]) * float64(w[j*k+p]))
			}
			if acc {
				mag += math.Abs(float64(out0[i*ldo+j]))
			}
			tol := 1e-6*mag + 1e-30
			if d := math.Abs(float64(got[i*ldo+j]) - ref[i*n+j]); d > tol || math.IsNaN(float64(got[i*ldo+j])) {
				t.Fatalf("%s m=%d n=%d k=%d acc=%v: out[%d,%d] = %v, want %v (|diff| %.3g > %.3g)", name, m, n, k, acc, i, j, got[i*ldo+j], ref[i*n+j], d, tol)
			}
		}
	}
}

func TestDotRowsAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, k := range []int{0, 1, 3, 7, 8, 9, 16, 64, 172} {
		for _, n := range []int{1, 3, 4, 5, 8, 13, 64} {
			for m := 1; m <= 17; m++ {
				for _, acc := range []bool{false, true} {
					ldo := n + 3
					x, w := testutil.RandNormal(r, m*k, 1), testutil.RandNormal(r, n*k, 1)
					out0 := testutil.RandNormal(r, (m-1)*ldo+n, 1)
					ref := refDot(out0, ldo, x, w, m, n, k, acc)
					got := append([]float32(nil), out0...)
					DotRows(got, ldo, x, k, w, k, m, n, k, acc)
					check(t, "DotRows", got, ldo, ref, x, w, out0, m, n, k, acc)
					for i := 0; i < m; i++ { // the padding between rows is untouched
						for j := n; j < ldo && i*ldo+j < len(got); j++ {
							if got[i*ldo+j] != out0[i*ldo+j] {
								t.Fatalf("m=%d n=%d k=%d: wrote out[%d,%d] past the %d columns", m, n, k, i, j, n)
							}
						}
					}
					goOut := append([]float32(nil), out0...)
					dotRowsGo(goOut, ldo, x, k, w, k, m, 0, n, k, acc)
					check(t, "dotRowsGo", goOut, ldo, ref, x, w, out0, m, n, k, acc)
				}
			}
		}
	}
}

// TestDotRowsBatchInvariant checks that a row's product is bit for bit the
// same whatever the number of rows in the call and the column range.
func TestDotRowsBatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for _, k := range []int{64, 172, 13} {
		n := 70
		w := testutil.RandNormal(r, n*k, 1)
		x := testutil.RandNormal(r, 16*k, 1)
		single := make([]float32, 16*n)
		for i := 0; i < 16; i++ {
			DotRows(single[i*n:], n, x[i*k:], k, w, k, 1, n, k, false)
		}
		for m := 2; m <= 16; m++ {
			got := make([]float32, m*n)
			DotRows(got, n, x, k, w[:36*k], k, m, 36, k, false) // columns 0..35
			DotRows(got[36:], n, x, k, w[36*k:], k, m, n-36, k, false)
			for i := 0; i < m*n; i++ {
				if got[i] != single[i] {
					t.Fatalf("k=%d m=%d: out[%d,%d] = %v in a batch, %v alone", k, m, i/n, i%n, got[i], single[i])
				}
			}
		}
	}
}

func TestDotRowsShortBuffersPanic(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("DotRows accepted a weight buffer shorter than n*k")
		}
	}()
	DotRows(make([]float32, 4), 4, make([]float32, 8), 8, make([]float32, 31), 8, 1, 4, 8, false)
}

// TestDotRowsStrided checks the strided form (one head's scores against a
// cache of several heads' keys) against a float64 reference.
func TestDotRowsStrided(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, c := range []struct{ m, n, k, ldx, ldw int }{{1, 37, 8, 8, 32}, {2, 150, 8, 16, 32}, {3, 9, 13, 20, 17}, {5, 64, 64, 70, 128}, {7, 21, 13, 20, 17}, {12, 40, 64, 70, 128}} {
		x, w := testutil.RandNormal(r, (c.m-1)*c.ldx+c.k, 1), testutil.RandNormal(r, (c.n-1)*c.ldw+c.k, 1)
		ldo := c.n + 1
		got := make([]float32, (c.m-1)*ldo+c.n)
		DotRows(got, ldo, x, c.ldx, w, c.ldw, c.m, c.n, c.k, false)
		for i := 0; i < c.m; i++ {
			for j := 0; j < c.n; j++ {
				var s, mag float64
				for p := 0; p < c.k; p++ {
					v := float64(x[i*c.ldx+p]) * float64(w[j*c.ldw+p])
					s += v
					mag += math.Abs(v)
				}
				if d := math.Abs(float64(got[i*ldo+j]) - s); d > 1e-6*mag {
					t.Fatalf("%+v: out[%d,%d] = %v, want %v", c, i, j, got[i*ldo+j], s)
				}
			}
		}
	}
}

func TestWeightedSumAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, c := range []struct{ n, k, ldv int }{{0, 8, 8}, {1, 8, 32}, {3, 8, 32}, {150, 8, 32}, {7, 13, 20}, {33, 24, 24}, {5, 3, 3}} {
		for _, acc := range []bool{false, true} {
			p, v := testutil.RandNormal(r, c.n, 1), testutil.RandNormal(r, max(0, (c.n-1)*c.ldv+c.k), 1)
			out0 := testutil.RandNormal(r, c.k+2, 1)
			got := append([]float32(nil), out0...)
			WeightedSum(got, p, v, c.ldv, c.n, c.k, acc)
			for d := 0; d < c.k; d++ {
				var s, mag float64
				for j := 0; j < c.n; j++ {
					x := float64(p[j]) * float64(v[j*c.ldv+d])
					s += x
					mag += math.Abs(x)
				}
				if acc {
					s += float64(out0[d])
					mag += math.Abs(float64(out0[d]))
				}
				if e := math.Abs(float64(got[d]) - s); e > 1e-6*mag+1e-30 {
					t.Fatalf("%+v acc=%v: out[%d] = %v, want %v", c, acc, d, got[d], s)
				}
			}
			if got[c.k] != out0[c.k] || got[c.k+1] != out0[c.k+1] {
				t.Fatalf("%+v: wrote past k", c)
			}
		}
	}
	// Zero weights past the end change nothing, bit for bit.
	p, v := testutil.RandNormal(r, 40, 1), testutil.RandNormal(r, 40*32, 1)
	a, b := make([]float32, 8), make([]float32, 8)
	WeightedSum(a, p[:37], v, 32, 37, 8, false)
	clear(p[37:])
	WeightedSum(b, p, v, 32, 40, 8, false)
	for d := range a {
		if a[d] != b[d] {
			t.Fatalf("out[%d] = %v over 37 keys, %v with 3 zero-weight keys more", d, a[d], b[d])
		}
	}
}

func TestExpShiftAgainstMathExp(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 7, 8, 9, 150} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 20)
		}
		x[0] = -1e30 // underflows to 0
		shift := float32(3)
		for i := range x {
			x[i] = min(x[i], shift)
		}
		in := append([]float32(nil), x...)
		sum := ExpShift(x, shift)
		var want float64
		for i, v := range in {
			e := math.Exp(float64(v - shift))
			if float32(e) < 1.2e-38 {
				e = 0
			}
			want += float64(x[i])
			if d := math.Abs(float64(x[i]) - e); d > 2e-7*e {
				t.Fatalf("n=%d: exp(%v) = %v, want %v", n, v-shift, x[i], e)
			}
		}
		if d := math.Abs(float64(sum) - want); d > 1e-6*want {
			t.Fatalf("n=%d: sum %v, want %v", n, sum, want)
		}
	}
}
