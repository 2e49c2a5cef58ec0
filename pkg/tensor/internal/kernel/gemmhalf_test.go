package kernel

import (
	"fmt"
	"github.com/drafter-ai/drafter/internal/testutil"
	"math"
	"math/rand/v2"
	"testing"
)

// checkGemmHalf runs one product with B in format h through SgemmHalf and
// through Sgemm on B widened beforehand, on two Gemms of the same kind and
// blocking, and requires the same bits everywhere in C (its padding
// included); the widened product is also checked against the float64
// reference. B's padding holds NaNs, which a packing that read past B's
// rows or columns would carry into C.
func checkGemmHalf(t *testing.T, g, g32 *Gemm, par Runner, workers int, r *rand.Rand, h Half, ta, tb bool, m, n, k, pad int, alpha, beta float32) {
	t.Helper()
	ar, ac, br, bc, lda, ldb, ldc := gemmShape(ta, tb, m, n, k, pad)
	a := testutil.RandNormal(r, max(0, (ar-1)*lda+ac), 1)
	bh := make([]uint16, max(0, (br-1)*ldb+bc))
	b32 := make([]float32, len(bh))
	for i := range bh {
		bh[i] = 0x7fc0 // NaN in both formats
		if i%ldb < bc {
			v := []float32{float32(r.NormFloat64())}
			if h == BF16 {
				F32ToBF16(bh[i:i+1], v)
			} else {
				F32ToF16(bh[i:i+1], v)
			}
		}
	}
	widenTo(h, b32, bh)
	c := testutil.RandNormal(r, (m-1)*ldc+n+pad, 1)
	c32 := append([]float32(nil), c...)
	want, tol := testutil.GemmRef(ta, tb, m, n, k, alpha, a, lda, b32, ldb, beta, c, ldc)
	g.SgemmHalf(par, workers, ta, tb, m, n, k, alpha, a, lda, h, bh, ldb, beta, c, ldc)
	g32.Sgemm(par, workers, ta, tb, m, n, k, alpha, a, lda, b32, ldb, beta, c32, ldc)
	name := fmt.Sprintf("%v kind %d ta=%v tb=%v m=%d n=%d k=%d pad=%d alpha=%g beta=%g", h, g.kind, ta, tb, m, n, k, pad, alpha, beta)
	if i, ok := sameBits(c, c32); !ok {
		t.Fatalf("%s: c[%d] = %v, Sgemm on the widened B gives %v", name, i, c[i], c32[i])
	}
	for i := range c {
		if i/ldc < m && i%ldc < n {
			if d := math.Abs(float64(c[i]) - want[i]); !(d <= tol[i]) {
				t.Fatalf("%s: c[%d,%d] = %g, want %g (err %g > tol %g)", name, i/ldc, i%ldc, c[i], want[i], d, tol[i])
			}
		}
	}
}

// TestGemmHalf covers every tail of the micro-tiles and of the eight-row
// packing, products of several row blocks (B then packed once for all), and
// concurrent chunks, in all four transpose cases and both formats.
func TestGemmHalf(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	sizes := [][3]int{{67, 71, 600}, {1100, 33, 61}, {31, 300, 17}, {97, 131, 257}}
	if testing.Short() {
		sizes = sizes[2:]
	}
	for _, kind := range kinds(t) {
		for _, h := range []Half{BF16, F16} {
			g, g32 := newGemm(kind), newGemm(kind)
			for _, tt := range [][2]bool{{false, true}, {false, false}, {true, true}, {true, false}} {
				for s := 1; s <= 40; s++ {
					checkGemmHalf(t, g, g32, nil, 1, r, h, tt[0], tt[1], 9, s, 23, 1, 1, 0)
					checkGemmHalf(t, g, g32, nil, 1, r, h, tt[0], tt[1], 5, 37, s, 0, 0.5, 1)
				}
				g.stepFloats, g.aFloats = 1<<15, 1<<16
				g32.stepFloats, g32.aFloats = 1<<15, 1<<16
				for i, s := range sizes {
					par := Runner(serialRunner)
					if i%2 == 1 {
						par = goRunner
					}
					checkGemmHalf(t, g, g32, par, 3, r, h, tt[0], tt[1], s[0], s[1], s[2], i%3, 1.5, float32(i%2))
				}
				g.stepFloats, g.aFloats = gemmStepFloats, gemmAFloats
				g32.stepFloats, g32.aFloats = gemmStepFloats, gemmAFloats
			}
		}
	}
}

// TestGemmHalfNoAlloc checks that a warm SgemmHalf allocates nothing.
func TestGemmHalfNoAlloc(t *testing.T) {
	g := NewGemm()
	m, n, k := 100, 90, 300
	a, b, c := make([]float32, m*k), make([]uint16, n*k), make([]float32, m*n)
	par := Runner(serialRunner)
	allocs := testing.AllocsPerRun(5, func() {
		g.SgemmHalf(par, 2, false, true, m, n, k, 1, a, k, BF16, b, k, 0, c, n)
		g.SgemmHalf(nil, 1, false, false, m, n, k, 1, a, k, F16, b, n, 1, c, n)
	})
	if allocs != 0 {
		t.Fatalf("warm SgemmHalf allocated %v times", allocs)
	}
}

// BenchmarkGemmHalf measures the prefill product x·Wᵀ of 512 rows on one
// goroutine with W in float32, bf16 and f16, for the 60M model's shapes and
// a 4096 x 4096 weight; bf16dot is GemmBF16 (activations rounded to
// bfloat16, VDPBF16PS) where the processor has AVX512_BF16.
func BenchmarkGemmHalf(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][3]int{{512, 1536, 512}, {512, 512, 1536}, {512, 4096, 4096}} {
		m, n, k := s[0], s[1], s[2]
		x, c := testutil.RandNormal(r, m*k, 1), make([]float32, m*n)
		w32 := testutil.RandNormal(r, n*k, 1)
		w16 := make([]uint16, n*k)
		F32ToBF16(w16, w32)
		for _, f := range []string{"f32", "bf16", "f16", "bf16dot"} {
			if f == "bf16dot" && !HasGemmBF16() {
				continue
			}
			b.Run(fmt.Sprintf("%dx%dx%d/%s", m, n, k, f), func(b *testing.B) {
				g := NewGemm()
				c0 := testutil.ProcessCPU()
				for b.Loop() {
					switch f {
					case "f32":
						g.Sgemm(nil, 1, false, true, m, n, k, 1, x, k, w32, k, 0, c, n)
					case "bf16":
						g.SgemmHalf(nil, 1, false, true, m, n, k, 1, x, k, BF16, w16, k, 0, c, n)
					case "f16":
						g.SgemmHalf(nil, 1, false, true, m, n, k, 1, x, k, F16, w16, k, 0, c, n)
					case "bf16dot":
						g.GemmBF16(nil, 1, m, n, k, x, k, w16, k, c, n, false)
					}
				}
				flops := 2 * float64(m*n*k) * float64(b.N)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(flops/(testutil.ProcessCPU()-c0)/1e9, "GFLOP/cpu-s")
			})
		}
	}
}
