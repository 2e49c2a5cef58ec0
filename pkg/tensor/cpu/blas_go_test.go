package cpu

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/tensor/internal/kernel"
)

// testGoGemm runs one product on the pure-Go backend and checks it against
// the float64 reference, and that the padding of C is untouched.
func testGoGemm(t *testing.T, r *rand.Rand, ta, tb bool, m, n, k, pad int, alpha, beta float32) {
	t.Helper()
	ar, ac := m, k
	if ta {
		ar, ac = k, m
	}
	br, bc := k, n
	if tb {
		br, bc = n, k
	}
	lda, ldb, ldc := ac+pad, bc+pad, n+pad
	a, b, c := testutil.RandNormal(r, (ar-1)*lda+ac, 1), testutil.RandNormal(r, (br-1)*ldb+bc, 1), testutil.RandNormal(r, (m-1)*ldc+n+pad, 1)
	if beta == 0 {
		for i := range c {
			if i%ldc < n {
				c[i] = float32(math.NaN()) // BLAS: beta = 0 ignores C
			}
		}
	}
	c0 := append([]float32(nil), c...)
	want64, tol := testutil.GemmRef(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	goBLAS{}.Sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	for i := range c {
		if i/ldc >= m || i%ldc >= n {
			if c[i] != c0[i] && !math.IsNaN(float64(c0[i])) {
				t.Fatalf("ta=%v tb=%v %dx%dx%d: wrote c[%d] outside C", ta, tb, m, n, k, i)
			}
			continue
		}
		// want rounded to float32, so half its last place is allowed besides.
		want := float32(want64[i])
		if d := math.Abs(float64(c[i]) - float64(want)); !(d <= tol[i]+math.Abs(float64(want))*0x1p-24) {
			t.Fatalf("ta=%v tb=%v %dx%dx%d alpha=%g beta=%g: c[%d,%d]=%g want %g (err %g > %g)", ta, tb, m, n, k, alpha, beta, i/ldc, i%ldc, c[i], want, d, tol[i])
		}
	}
}

// TestGoSgemm checks the pure-Go backend in all four transpose cases, at
// sizes that run on the calling goroutine and sizes split over the workers.
func TestGoSgemm(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tt := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
		for _, s := range [][3]int{{1, 1, 1}, {3, 70, 5}, {37, 41, 43}, {130, 257, 67}, {300, 97, 150}, {67, 1600, 11}} {
			testGoGemm(t, r, tt[0], tt[1], s[0], s[1], s[2], 3, 1, 0)
			testGoGemm(t, r, tt[0], tt[1], s[0], s[1], s[2], 0, -0.5, 1)
			testGoGemm(t, r, tt[0], tt[1], s[0], s[1], s[2], 1, 2, 0.5)
		}
	}
}

// TestGoSgemmConcurrent runs products on the backend from several
// goroutines at once, as pkg/model does, each checked against the reference.
func TestGoSgemmConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	m, n, k := 150, 200, 130
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			a, b := testutil.RandNormal(r, m*k, 1), testutil.RandNormal(r, n*k, 1)
			want, _ := testutil.GemmRef(false, true, m, n, k, 1, a, k, b, k, 0, make([]float32, m*n), n)
			c := make([]float32, m*n)
			for it := 0; it < 5; it++ {
				goBLAS{}.Sgemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
				for i := range c {
					if w := float32(want[i]); math.Abs(float64(c[i]-w)) > 1e-4*(1+math.Abs(float64(w))) {
						errs <- "concurrent products disagree with the reference"
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// TestGoSgemmNoAlloc checks that a warm product allocates nothing, split
// over the workers or not.
func TestGoSgemmNoAlloc(t *testing.T) {
	if !kernel.NewGemm().Vector() {
		t.Skip("no vector Sgemm kernel here: the backend runs gonum's, which allocates")
	}
	m, n, k := 256, 384, 320
	a, b, c := make([]float32, m*k), make([]float32, n*k), make([]float32, m*n)
	be := goBLAS{}
	be.Sgemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
	allocs := testing.AllocsPerRun(5, func() {
		be.Sgemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
		be.Sgemm(true, false, m, n, k, 1, a, m, b, n, 1, c, n)
		be.Sgemm(false, false, 20, 30, 40, 1, a, 40, b, 30, 0, c, 30)
	})
	if allocs != 0 {
		t.Fatalf("warm Sgemm allocated %v times", allocs)
	}
}

// TestGoSgemv checks the pure-Go Sgemv, through the vector kernels (alpha
// 1, beta 0 or 1) and gonum (other scalars), against a float64 reference.
func TestGoSgemv(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 11))
	for _, sz := range [][2]int{{1, 1}, {37, 19}, {64, 130}, {5, 300}} {
		m, n := sz[0], sz[1]
		lda := n + 2
		a := testutil.RandNormal(r, (m-1)*lda+n, 1)
		for _, trans := range []bool{false, true} {
			for _, ab := range [][2]float32{{1, 0}, {1, 1}, {0.5, 2}, {-1, 0}} {
				xl, yl := n, m
				if trans {
					xl, yl = m, n
				}
				x, y := testutil.RandNormal(r, xl, 1), testutil.RandNormal(r, yl, 1)
				if ab[1] == 0 {
					for i := range y {
						y[i] = float32(math.NaN())
					}
				}
				y0 := append([]float32(nil), y...)
				goBLAS{}.Sgemv(trans, m, n, ab[0], a, lda, x, ab[1], y)
				for i := 0; i < yl; i++ {
					var s, sa float64
					for j := 0; j < xl; j++ {
						var av float32
						if trans {
							av = a[j*lda+i]
						} else {
							av = a[i*lda+j]
						}
						s += float64(av) * float64(x[j])
						sa += math.Abs(float64(av) * float64(x[j]))
					}
					want := float64(ab[0]) * s
					tol := math.Abs(float64(ab[0])) * sa
					if ab[1] != 0 {
						want += float64(ab[1]) * float64(y0[i])
						tol += math.Abs(float64(ab[1]) * float64(y0[i]))
					}
					tol *= float64(xl+2) * 0x1p-24 / (1 - float64(xl+2)*0x1p-24) // as gemmTol
					if d := math.Abs(float64(y[i]) - want); !(d <= tol+1e-37) {
						t.Fatalf("m=%d n=%d trans=%v alpha=%g beta=%g: y[%d]=%g want %g", m, n, trans, ab[0], ab[1], i, y[i], want)
					}
				}
			}
		}
	}
}
