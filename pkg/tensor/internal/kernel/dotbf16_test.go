package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// needGemmBF16 skips a test where GemmBF16 does not run.
func needGemmBF16(t testing.TB) {
	t.Helper()
	if !HasGemmBF16() {
		t.Skip("no AVX512_BF16 here: GemmBF16 does not run (products keep SgemmHalf)")
	}
}

// checkGemmBF16 runs one product C (+)= A·Bᵀ through GemmBF16 and compares
// it with the float64 reference on A rounded to bfloat16 (nearest, ties to
// even: the scalar f32ToBF16, not the vector conversion the packing runs)
// and B widened. Every product of two bfloat16 values is exact in float32,
// so the kernel's only error is the float32 rounding of its at most k+1
// additions (VDPBF16PS adds a pair's two exact products, each add rounded,
// and the steps over k add to C): testutil.GemmRef's bound γ(k+2)·Σ|a||b|
// (plus |C| when acc) holds for it. The random operands have no subnormals,
// which the instruction would flush. A's and B's padding hold NaNs, which a
// packing that read past a row (the pad of an odd k's last pair included)
// would carry into C; C's padding must keep its bits.
func checkGemmBF16(t *testing.T, g *Gemm, par Runner, workers int, r *rand.Rand, m, n, k, pad int, acc bool) {
	t.Helper()
	lda, ldb, ldc := k+pad, k+pad, n+3*pad
	nan := float32(math.NaN())
	a := testutil.RandNormal(r, (m-1)*lda+k, 1)
	ar := make([]float32, len(a)) // A rounded to bfloat16, padding 0
	for i := range a {
		if i%lda >= k {
			a[i] = nan
			continue
		}
		ar[i] = bf16ToF32(f32ToBF16(a[i]))
	}
	b := make([]uint16, (n-1)*ldb+k)
	bw := make([]float32, len(b))
	for i := range b {
		b[i] = 0x7fc0 // NaN
		if i%ldb < k {
			b[i] = f32ToBF16(float32(r.NormFloat64()))
		}
		bw[i] = bf16ToF32(b[i])
	}
	c := testutil.RandNormal(r, (m-1)*ldc+n+pad, 1)
	c0 := append([]float32(nil), c...)
	var beta float32
	if acc {
		beta = 1
	}
	want, tol := testutil.GemmRef(false, true, m, n, k, 1, ar, lda, bw, ldb, beta, c, ldc)
	g.GemmBF16(par, workers, m, n, k, a, lda, b, ldb, c, ldc, acc)
	name := fmt.Sprintf("m=%d n=%d k=%d pad=%d acc=%v workers=%d", m, n, k, pad, acc, workers)
	for i := range c {
		if i/ldc >= m || i%ldc >= n {
			if math.Float32bits(c[i]) != math.Float32bits(c0[i]) {
				t.Fatalf("%s: C's padding c[%d] changed from %v to %v", name, i, c0[i], c[i])
			}
			continue
		}
		if d := math.Abs(float64(c[i]) - want[i]); !(d <= tol[i]) {
			t.Fatalf("%s: c[%d,%d] = %g, want %g (err %g > tol %g)", name, i/ldc, i%ldc, c[i], want[i], d, tol[i])
		}
	}
}

// TestGemmBF16 covers every tail of the 14 x 32 tiles and of the eight-row
// packing, odd k (a last pair padded with zero), odd and even row strides
// (B's rows on whole pairs or not), several k steps and row blocks, and
// concurrent chunks, with and without accumulation.
func TestGemmBF16(t *testing.T) {
	needGemmBF16(t)
	r := rand.New(rand.NewPCG(31, 32))
	g := NewGemm()
	for s := 1; s <= 40; s++ {
		checkGemmBF16(t, g, nil, 1, r, 15, s, 23, s%4, s%2 == 0)
		checkGemmBF16(t, g, nil, 1, r, 5, 37, s, s%3, s%2 == 1)
		checkGemmBF16(t, g, nil, 1, r, s, 33, 9, 1, false)
	}
	sizes := [][3]int{{67, 71, 600}, {1100, 33, 61}, {31, 300, 17}, {97, 131, 257}, {29, 64, 513}, {28, 64, 1024}}
	if testing.Short() {
		sizes = sizes[2:]
	}
	for _, small := range []bool{false, true} {
		g := NewGemm()
		g.dot = newDotGemm()
		if small {
			// Several row blocks and k steps.
			g.dot.stepWords, g.dot.aWords = 1<<12, 1<<13
		}
		for i, s := range sizes {
			par := Runner(serialRunner)
			if i%2 == 1 {
				par = goRunner
			}
			checkGemmBF16(t, g, par, 3, r, s[0], s[1], s[2], i%3, i%2 == 0)
			checkGemmBF16(t, g, nil, 1, r, s[0], s[1], s[2], (i+1)%3, i%2 == 1)
		}
	}
}

// TestGemmBF16Exact: on small integers every product and sum is exact in
// float32, so GemmBF16 must give the exact product, bit for bit, and a
// value that rounds to a bfloat16 tie must round to even.
func TestGemmBF16Exact(t *testing.T) {
	needGemmBF16(t)
	g := NewGemm()
	for _, k := range []int{1, 2, 3, 31, 64, 257} {
		m, n := 17, 45
		a := make([]float32, m*k)
		b := make([]uint16, n*k)
		for i := range a {
			a[i] = float32(i%7 - 3)
		}
		for i := range b {
			b[i] = f32ToBF16(float32(i%5 - 2))
		}
		// 1 + 2^-8 is halfway between 1 and the next bfloat16 (1 + 2^-7),
		// so it rounds to 1; 1 + 3·2^-8 rounds up to 1 + 2^-6.
		a[0], a[1%len(a)] = 1+0x1p-8, 1+3*0x1p-8
		c := make([]float32, m*n)
		g.GemmBF16(nil, 1, m, n, k, a, k, b, k, c, n, false)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s float32
				for p := 0; p < k; p++ {
					av := a[i*k+p]
					switch i*k + p {
					case 0:
						av = 1
					case 1:
						av = 1 + 0x1p-6
					}
					s += av * bf16ToF32(b[j*k+p])
				}
				if c[i*n+j] != s {
					t.Fatalf("k=%d: c[%d,%d] = %v, want %v", k, i, j, c[i*n+j], s)
				}
			}
		}
	}
}

// TestGemmBF16NoAlloc checks that a warm GemmBF16 allocates nothing.
func TestGemmBF16NoAlloc(t *testing.T) {
	needGemmBF16(t)
	g := NewGemm()
	m, n, k := 100, 90, 301
	a, b, c := make([]float32, m*k), make([]uint16, n*k), make([]float32, m*n)
	par := Runner(serialRunner)
	allocs := testing.AllocsPerRun(5, func() {
		g.GemmBF16(par, 2, m, n, k, a, k, b, k, c, n, false)
		g.GemmBF16(nil, 1, m, n, k, a, k, b, k, c, n, true)
	})
	if allocs != 0 {
		t.Fatalf("warm GemmBF16 allocated %v times", allocs)
	}
}
