package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// serialRunner runs the chunks one after another, in reverse order, so that
// a chunk that depended on an earlier one's side effects would show.
func serialRunner(n, chunks int, fn func(c, lo, hi int)) {
	chunks = min(chunks, n)
	sz := ceilDiv(n, chunks)
	for c := (n+sz-1)/sz - 1; c >= 0; c-- {
		fn(c, c*sz, min(c*sz+sz, n))
	}
}

// goRunner runs every chunk on its own goroutine.
func goRunner(n, chunks int, fn func(c, lo, hi int)) {
	chunks = min(chunks, n)
	sz := ceilDiv(n, chunks)
	var wg sync.WaitGroup
	for c := 0; c*sz < n; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(c, c*sz, min(c*sz+sz, n))
		}()
	}
	wg.Wait()
}

// gemmShape returns the stored shapes of op(A) m x k and op(B) k x n (rows
// and columns of A and B as held) and the strides the tests give A, B and
// C: their widths plus pad, 2*pad and 3*pad.
func gemmShape(ta, tb bool, m, n, k, pad int) (ar, ac, br, bc, lda, ldb, ldc int) {
	ar, ac = m, k
	if ta {
		ar, ac = k, m
	}
	br, bc = k, n
	if tb {
		br, bc = n, k
	}
	return ar, ac, br, bc, ac + pad, bc + 2*pad, n + 3*pad
}

// checkGemm runs one product on g and compares it with the reference,
// including the padding around C, which must be left alone.
func checkGemm(t *testing.T, g *Gemm, par Runner, workers int, r *rand.Rand, ta, tb bool, m, n, k, pad int, alpha, beta float32) {
	t.Helper()
	ar, ac, br, bc, lda, ldb, ldc := gemmShape(ta, tb, m, n, k, pad)
	a := testutil.RandNormal(r, max(0, (ar-1)*lda+ac), 1)
	b := testutil.RandNormal(r, max(0, (br-1)*ldb+bc), 1)
	c := testutil.RandNormal(r, (m-1)*ldc+n+pad, 1)
	if beta == 0 {
		for i := range c {
			if i%ldc < n {
				c[i] = float32(math.NaN())
			}
		}
	}
	orig := append([]float32(nil), c...)
	want, tol := testutil.GemmRef(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	g.Sgemm(par, workers, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	for i := range c {
		if i/ldc >= m || i%ldc >= n {
			if c[i] != orig[i] && !(math.IsNaN(float64(c[i])) && math.IsNaN(float64(orig[i]))) {
				t.Fatalf("kind %d ta=%v tb=%v m=%d n=%d k=%d pad=%d: wrote outside C at %d", g.kind, ta, tb, m, n, k, pad, i)
			}
			continue
		}
		if d := math.Abs(float64(c[i]) - want[i]); !(d <= tol[i]) {
			t.Fatalf("kind %d ta=%v tb=%v m=%d n=%d k=%d pad=%d alpha=%g beta=%g: c[%d,%d]=%g want %g (err %g > tol %g)",
				g.kind, ta, tb, m, n, k, pad, alpha, beta, i/ldc, i%ldc, c[i], want[i], d, tol[i])
		}
	}
}

// kinds returns the micro-kernel kinds this processor runs.
func kinds(t *testing.T) []int {
	var ks []int
	for _, k := range []int{kindGo, kindAVX2, kindAVX512} {
		if kindSupported(k) {
			ks = append(ks, k)
		} else {
			t.Logf("kernel kind %d not supported here: skipped", k)
		}
	}
	return ks
}

// TestGemmSmall covers every size 1..70 of one dimension with the others at
// odd sizes, in all four transpose cases: every tail of every micro-tile.
func TestGemmSmall(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, kind := range kinds(t) {
		g := newGemm(kind)
		for _, tt := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for s := 1; s <= 70; s++ {
				checkGemm(t, g, nil, 1, r, tt[0], tt[1], s, 37, 23, 0, 1, 0)
				checkGemm(t, g, nil, 1, r, tt[0], tt[1], 29, s, 19, 1, 0.5, 1)
				checkGemm(t, g, nil, 1, r, tt[0], tt[1], 17, 41, s, 3, -2, 0.25)
			}
		}
	}
}

// TestGemmBlocks covers products larger than one block in every dimension,
// with the chunks run in reverse order and concurrently.
func TestGemmBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	sizes := [][3]int{{67, 71, 600}, {1100, 33, 61}, {31, 3200, 17}, {97, 131, 257}, {128, 96, 512}}
	if testing.Short() {
		sizes = sizes[3:]
	}
	for _, kind := range kinds(t) {
		g := newGemm(kind)
		// Row blocks of 60 to 130 rows here, instead of about a thousand.
		g.stepFloats, g.aFloats = 1<<15, 1<<16
		for _, tt := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for i, s := range sizes {
				par, workers := Runner(serialRunner), 3
				if i%2 == 1 {
					par = goRunner
				}
				// alpha, beta and padding: one of three combinations each.
				switch (i + kind) % 3 {
				case 0:
					checkGemm(t, g, par, workers, r, tt[0], tt[1], s[0], s[1], s[2], 2, 1.5, 0)
				case 1:
					checkGemm(t, g, par, workers, r, tt[0], tt[1], s[0], s[1], s[2], 0, 1, 1)
				default:
					checkGemm(t, g, par, workers, r, tt[0], tt[1], s[0], s[1], s[2], 5, -1, -0.5)
				}
			}
		}
	}
}

// TestGemmScalars covers alpha = 0 and k = 0 (C = beta*C, zeroed when beta
// is 0 even where it holds NaN) and leaves the rest of C alone.
func TestGemmScalars(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, kind := range kinds(t) {
		g := newGemm(kind)
		for _, k := range []int{0, 5} {
			for _, alpha := range []float32{0, 1} {
				if k != 0 && alpha != 0 {
					continue
				}
				for _, beta := range []float32{0, 1, 3} {
					checkGemm(t, g, nil, 1, r, false, true, 9, 13, k, 2, alpha, beta)
				}
			}
		}
	}
}

// TestGemmNoAlloc checks that a warm Gemm allocates nothing.
func TestGemmNoAlloc(t *testing.T) {
	g := NewGemm()
	m, n, k := 100, 90, 300
	a, b, c := make([]float32, m*k), make([]float32, n*k), make([]float32, m*n)
	par := Runner(serialRunner)
	allocs := testing.AllocsPerRun(5, func() {
		g.Sgemm(par, 2, false, true, m, n, k, 1, a, k, b, k, 0, c, n)
		g.Sgemm(nil, 1, true, false, m, n, k, 1, a, m, b, n, 1, c, n)
	})
	if allocs != 0 {
		t.Fatalf("warm Sgemm allocated %v times", allocs)
	}
}

// BenchmarkGemm measures Sgemm on one goroutine with each vector kernel.
func BenchmarkGemm(b *testing.B) {
	for _, s := range [][3]int{{512, 1536, 512}, {512, 512, 512}, {192, 1536, 512}} {
		for _, kind := range []int{kindAVX2, kindAVX512} {
			if !kindSupported(kind) {
				continue
			}
			for _, tt := range [][2]bool{{false, true}, {false, false}, {true, false}} {
				m, n, k := s[0], s[1], s[2]
				b.Run(fmt.Sprintf("kind%d/%dx%dx%d/ta=%v,tb=%v", kind, m, n, k, tt[0], tt[1]), func(b *testing.B) {
					g := newGemm(kind)
					x, y, z := make([]float32, m*k), make([]float32, n*k), make([]float32, m*n)
					lda, ldb := k, n
					if tt[0] {
						lda = m
					}
					if tt[1] {
						ldb = k
					}
					c0 := testutil.ProcessCPU()
					for b.Loop() {
						g.Sgemm(nil, 1, tt[0], tt[1], m, n, k, 1, x, lda, y, ldb, 0, z, n)
					}
					flops := 2 * float64(m*n*k) * float64(b.N)
					b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					// On a shared machine the process's CPU time measures the
					// kernel better than the wall clock.
					b.ReportMetric(flops/(testutil.ProcessCPU()-c0)/1e9, "GFLOP/cpu-s")
				})
			}
		}
	}
}
