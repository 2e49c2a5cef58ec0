package kernel

import (
	"fmt"
	"github.com/drafter-ai/drafter/internal/testutil"
	"math"
	"math/rand/v2"
	"testing"
)

// fma32 returns a·b+c rounded once to float32, as VFMADD231PS computes it.
// The product of two float32 is exact in float64, and the float64 sum
// rounded to odd (from the round-to-nearest sum and its exact error) keeps
// enough to round correctly to float32 afterwards.
func fma32(a, b, c float32) float32 {
	p, q := float64(a)*float64(b), float64(c)
	s := p + q
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	v := s - p
	e := (p - (s - v)) + (q - v) // s + e = p + q exactly
	if bits := math.Float64bits(s); e != 0 && bits&1 == 0 {
		if (e > 0) == (s > 0) {
			bits++
		} else {
			bits--
		}
		s = math.Float64frombits(bits)
	}
	return float32(s)
}

// TestFMA32 checks the reference fused multiply-add on cases where rounding
// the product first, or rounding the float64 sum to nearest, goes wrong.
func TestFMA32(t *testing.T) {
	for _, c := range []struct{ a, b, c, want float32 }{
		// 1+2^-23 squared is 1+2^-22+2^-46: the 2^-46 decides the tie of
		// -1-2^-22 + it.
		{1 + 0x1p-23, 1 + 0x1p-23, -1, 0x1p-22 + 0x1p-46},
		// 1 + 2^-24 + 2^-60: the float64 sum rounds to the float32 tie
		// 1+2^-24, which rounds to even (1), but the exact value is above it.
		{0x1p-24 + 0x1p-47, 1 + 0x1p-13, 1, 1 + 0x1p-23},
		{2, 3, 4, 10},
		{float32(math.Inf(1)), 0, 1, float32(math.NaN())},
	} {
		got := fma32(c.a, c.b, c.c)
		if got != c.want && !(got != got && c.want != c.want) {
			t.Errorf("fma32(%g, %g, %g) = %g, want %g", c.a, c.b, c.c, got, c.want)
		}
	}
}

// dotHalfFMA computes DotRowsBF16's contract with exact fused multiply-adds:
// what the assembly must give bit for bit.
func dotHalfFMA(h Half, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var l [16]float32
			for p := 0; p < (k+15)&^15; p++ {
				var xv, wv float32
				if p < k {
					xv, wv = x[i*ldx+p], widenOne(h, w[j*ldw+p])
				}
				l[p%16] = fma32(xv, wv, l[p%16])
			}
			s := reduce16(&l)
			if acc {
				s += out[i*ldo+j]
			}
			out[i*ldo+j] = s
		}
	}
}

func widenOne(h Half, v uint16) float32 {
	if h == BF16 {
		return bf16ToF32(v)
	}
	return f16ToF32(v)
}

// halfDotFunc is the signature of dotRowsHalf and its bodies.
type halfDotFunc = func(h Half, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool)

// halfCase is a random product for the DotRowsBF16 tests: weights rounded
// to the format, strides past the rows, and NaNs in every padding element
// (between rows, past the columns), which a kernel reading outside its
// operands would turn into NaN results.
type halfCase struct {
	h                   Half
	m, n, k             int
	ldx, ldw, ldo       int
	x, out0             []float32
	w                   []uint16
	acc                 bool
	wf                  []float32 // the weights' values
	absDot, absOut, ref []float64
}

func newHalfCase(r *rand.Rand, h Half, m, n, k int, acc bool) *halfCase {
	c := &halfCase{h: h, m: m, n: n, k: k, acc: acc, ldx: k + r.IntN(3), ldw: k + r.IntN(3), ldo: n + r.IntN(3)}
	nan := float32(math.NaN())
	c.x = make([]float32, m*c.ldx)
	for i := range c.x {
		c.x[i] = nan
	}
	c.w = make([]uint16, n*c.ldw)
	for i := range c.w {
		c.w[i] = 0x7fc0 // NaN in both formats
	}
	c.out0 = make([]float32, m*c.ldo)
	for i := range c.out0 {
		c.out0[i] = nan
	}
	conv := F32ToBF16
	if h == F16 {
		conv = F32ToF16
	}
	var one [1]uint16
	for i := 0; i < m; i++ {
		for p := 0; p < k; p++ {
			c.x[i*c.ldx+p] = float32(r.NormFloat64())
		}
		for j := 0; j < n; j++ {
			c.out0[i*c.ldo+j] = float32(r.NormFloat64())
		}
	}
	c.wf = make([]float32, n*k)
	for j := 0; j < n; j++ {
		for p := 0; p < k; p++ {
			conv(one[:], []float32{float32(r.NormFloat64() * 0.1)})
			c.w[j*c.ldw+p] = one[0]
			c.wf[j*k+p] = widenOne(h, one[0])
		}
	}
	c.ref, c.absDot, c.absOut = make([]float64, m*n), make([]float64, m*n), make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, a float64
			for p := 0; p < k; p++ {
				v := float64(c.x[i*c.ldx+p]) * float64(c.wf[j*k+p])
				s += v
				a += math.Abs(v)
			}
			if acc {
				s += float64(c.out0[i*c.ldo+j])
				c.absOut[i*n+j] = math.Abs(float64(c.out0[i*c.ldo+j]))
			}
			c.ref[i*n+j], c.absDot[i*n+j] = s, a
		}
	}
	return c
}

func (c *halfCase) String() string {
	return fmt.Sprintf("%v m=%d n=%d k=%d ldx=%d ldw=%d ldo=%d acc=%v", c.h, c.m, c.n, c.k, c.ldx, c.ldw, c.ldo, c.acc)
}

// run computes the product with f into a copy of out0.
func (c *halfCase) run(f halfDotFunc) []float32 {
	out := append([]float32(nil), c.out0...)
	f(c.h, out, c.ldo, c.x, c.ldx, c.w, c.ldw, c.m, c.n, c.k, c.acc)
	return out
}

// tol is the bound on |result - exact| for element (i, j): each of the 16
// lanes sums at most L = ceil(k/16) products in a chain of L roundings
// (L+1 when the product is rounded apart from the add), the reduction adds
// 4 and acc 1, so the float32 result is within gamma(L+6)·(Σ|x·w| + |old|),
// gamma(t) = t·u/(1-t·u) with u = 2^-24, of the exact value; the float64
// reference adds its own k·2^-53 relative error, and every operation at most
// 2^-149 of underflow.
func (c *halfCase) tol(i, j int) float64 {
	const u = 0x1p-24
	t := float64((c.k+15)/16 + 6)
	mag := c.absDot[i*c.n+j] + c.absOut[i*c.n+j]
	return t*u/(1-t*u)*mag + float64(c.k)*0x1p-53*mag + float64(c.k+16)*0x1p-149
}

// check compares out with the float64 reference, and the padding with
// out0's NaNs.
func (c *halfCase) check(t *testing.T, name string, out []float32) {
	t.Helper()
	for i := 0; i < c.m; i++ {
		for j := 0; j < c.ldo; j++ {
			got := out[i*c.ldo+j]
			if j >= c.n {
				if got == got {
					t.Fatalf("%s %v: wrote out[%d, %d] past the %d columns", name, c, i, j, c.n)
				}
				continue
			}
			if d := math.Abs(float64(got) - c.ref[i*c.n+j]); !(d <= c.tol(i, j)) {
				t.Fatalf("%s %v: out[%d, %d] = %v, want %v (|diff| %.3g > %.3g)", name, c, i, j, got, c.ref[i*c.n+j], d, c.tol(i, j))
			}
		}
	}
}

// sameBits reports whether a and b hold the same float32 values bit for
// bit, any NaN matching any NaN, and where they first differ.
func sameBits(a, b []float32) (int, bool) {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
			return i, false
		}
	}
	return 0, true
}

// halfShapes returns the shapes the DotRowsBF16 tests run: every m from 1
// to 48 with k and n including tails of the vector width and of the tiles.
func halfShapes(r *rand.Rand) [][3]int {
	var s [][3]int
	for m := 1; m <= 48; m++ {
		for _, k := range []int{1, 15, 16, 17, 33, 64 + r.IntN(64)} {
			s = append(s, [3]int{m, 1 + r.IntN(13), k})
		}
	}
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 67} {
		for _, k := range []int{0, 7, 16, 31, 100, 515} {
			s = append(s, [3]int{1 + r.IntN(13), n, k})
		}
	}
	return s
}

// TestDotRowsHalf checks DotRowsBF16 and DotRowsF16 against a float64
// reference with the same weights, within the derived bound, and, where
// they run in assembly, bit for bit against the exact fused multiply-add
// model of their contract; the Go body too.
func TestDotRowsHalf(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, h := range []Half{BF16, F16} {
		exported := DotRowsBF16
		if h == F16 {
			exported = DotRowsF16
		}
		asm := dotRowsHalfAsm(h)
		for _, s := range halfShapes(r) {
			for _, acc := range []bool{false, true} {
				c := newHalfCase(r, h, s[0], s[1], s[2], acc)
				got := c.run(func(_ Half, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) {
					exported(out, ldo, x, ldx, w, ldw, m, n, k, acc)
				})
				c.check(t, "exported", got)
				if asm && c.k > 0 {
					want := c.run(dotHalfFMA)
					if i, ok := sameBits(got, want); !ok {
						t.Fatalf("%v: out[%d] = %v, the fused multiply-add model gives %v", c, i, got[i], want[i])
					}
				}
				c.check(t, "dotRowsHalfGo", c.run(dotRowsHalfGo))
			}
		}
	}
}

// TestDotRowsHalfRowIndependence checks that a row's result is the same
// bits whether it is computed alone, in a batch of m rows, or in a batch
// split at any row or column, in the exported function and the Go body.
func TestDotRowsHalfRowIndependence(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	bodies := map[string]halfDotFunc{
		"exported": dotRowsHalf, "go": dotRowsHalfGo,
	}
	for name, f := range bodies {
		for _, h := range []Half{BF16, F16} {
			for m := 1; m <= 48; m++ {
				k := []int{5, 16, 37, 200}[m%4]
				n := 1 + r.IntN(21)
				c := newHalfCase(r, h, m, n, k, m%2 == 0)
				batch := c.run(f)
				// Each row alone.
				for i := 0; i < m; i++ {
					out := append([]float32(nil), c.out0[i*c.ldo:(i+1)*c.ldo]...)
					f(h, out, c.ldo, c.x[i*c.ldx:], c.ldx, c.w, c.ldw, 1, n, k, c.acc)
					if j, ok := sameBits(out, batch[i*c.ldo:(i+1)*c.ldo]); !ok {
						t.Fatalf("%s %v: row %d alone gives out[%d] = %v, in the batch %v", name, c, i, j, out[j], batch[i*c.ldo+j])
					}
				}
				// The batch split at a row and at a column.
				i0, j0 := r.IntN(m+1), r.IntN(n+1)
				out := append([]float32(nil), c.out0...)
				for _, rows := range [][2]int{{0, i0}, {i0, m}} {
					for _, cols := range [][2]int{{0, j0}, {j0, n}} {
						if rows[1] > rows[0] && cols[1] > cols[0] {
							f(h, out[rows[0]*c.ldo+cols[0]:], c.ldo, c.x[rows[0]*c.ldx:], c.ldx, c.w[cols[0]*c.ldw:], c.ldw,
								rows[1]-rows[0], cols[1]-cols[0], k, c.acc)
						}
					}
				}
				if j, ok := sameBits(out, batch); !ok {
					t.Fatalf("%s %v split at row %d, column %d: out[%d] = %v, unsplit %v", name, c, i0, j0, j, out[j], batch[j])
				}
			}
		}
	}
}

// TestDotRowsHalfSpecialValues checks that a NaN or infinite weight or
// input reaches only its own elements, as in the float64 product.
func TestDotRowsHalfSpecialValues(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 11))
	for _, h := range []Half{BF16, F16} {
		inf := uint16(0x7f80)
		if h == F16 {
			inf = 0x7c00
		}
		for _, k := range []int{3, 16, 21, 50} {
			c := newHalfCase(r, h, 7, 6, k, false)
			c.w[2*c.ldw+k-1] = inf        // weight row 2: ±Inf results
			c.w[4*c.ldw] = inf | 0x8001   // weight row 4: a NaN
			c.x[5*c.ldx+k/2] = 0          // 0·Inf in row 5, weight row 2: NaN
			c.w[2*c.ldw+k/2] = inf | 0x40 // (and a NaN there)
			got := c.run(dotRowsHalf)
			for i := 0; i < c.m; i++ {
				for j := 0; j < c.n; j++ {
					var want float64
					for p := 0; p < k; p++ {
						want += float64(c.x[i*c.ldx+p]) * float64(widenOne(h, c.w[j*c.ldw+p]))
					}
					g := float64(got[i*c.ldo+j])
					if math.IsNaN(want) != math.IsNaN(g) || (math.IsInf(want, 0) && want != g) {
						t.Fatalf("%v: out[%d, %d] = %v, want %v", c, i, j, g, want)
					}
				}
			}
		}
	}
}

// BenchmarkDotRowsHalf measures one- and eight-row products over f32, bf16
// and f16 weights of large matrices (GB/s of weight bytes read) and of the
// 60M benchmark model's shapes.
func BenchmarkDotRowsHalf(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct{ n, k int }{{4096, 4096}, {14336, 4096}, {1536, 512}, {32000, 512}} {
		w32 := testutil.RandNormal(r, s.n*s.k, 1)
		w16 := make([]uint16, len(w32))
		F32ToBF16(w16, w32)
		for _, m := range []int{1, 8, 48} {
			if m == 48 && s.n*s.k > 1<<24 {
				continue
			}
			x := testutil.RandNormal(r, m*s.k, 1)
			out := make([]float32, m*s.n)
			for _, f := range []string{"f32", "bf16", "f16"} {
				b.Run(fmt.Sprintf("%dx%d/m%d/%s", s.n, s.k, m, f), func(b *testing.B) {
					bytes := 2
					for b.Loop() {
						switch f {
						case "f32":
							bytes = 4
							DotRows(out, s.n, x, s.k, w32, s.k, m, s.n, s.k, false)
						case "bf16":
							DotRowsBF16(out, s.n, x, s.k, w16, s.k, m, s.n, s.k, false)
						case "f16":
							DotRowsF16(out, s.n, x, s.k, w16, s.k, m, s.n, s.k, false)
						}
					}
					sec := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(bytes*s.n*s.k)/sec/1e9, "GB/s")
					b.ReportMetric(2*float64(m*s.n*s.k)/sec/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// TestDotRowsHalfNoAlloc checks that the products allocate nothing, their
// column tails included.
func TestDotRowsHalfNoAlloc(t *testing.T) {
	x, w, out := make([]float32, 7*37), make([]uint16, 13*37), make([]float32, 7*13)
	allocs := testing.AllocsPerRun(5, func() {
		DotRowsBF16(out, 13, x, 37, w, 37, 7, 13, 37, false)
		DotRowsF16(out, 13, x, 37, w, 37, 7, 13, 37, true)
		DotRowsBF16(out, 13, x, 37, w, 37, 7, 3, 37, true)
	})
	if allocs != 0 {
		t.Fatalf("DotRowsBF16 allocated %v times", allocs)
	}
}

// TestDotRowsHalfShortBuffers checks that buffers too short for the shape
// panic with a message naming the function and the sizes.
func TestDotRowsHalfShortBuffers(t *testing.T) {
	defer func() {
		want := "tensor: DotRowsF16 buffers too short or strides too small (out 6, x 8, w 11) for m=2 n=3 k=4 ldo=3 ldx=4 ldw=4"
		if r := recover(); fmt.Sprint(r) != want {
			t.Fatalf("recovered %v, want %q", r, want)
		}
	}()
	DotRowsF16(make([]float32, 6), 3, make([]float32, 8), 4, make([]uint16, 11), 4, 2, 3, 4, false)
}
