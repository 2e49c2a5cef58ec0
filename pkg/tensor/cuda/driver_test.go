package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestTimer: events recorded around work on the stream give a non-negative
// device time, a timer can be reused, and Close frees its events.
func TestTimer(t *testing.T) {
	d := openTest(t)
	tm, err := d.NewTimer()
	if err != nil {
		t.Fatal(err)
	}
	x := devTensor(t, d, make([]float32, 1<<16), 1, 1<<16)
	for i := 0; i < 2; i++ {
		tm.Start()
		d.Scale(x, 2)
		d.Zero(x)
		if el := tm.Stop(); el < 0 || el > time.Minute {
			t.Errorf("elapsed %v", el)
		}
	}
	if err := tm.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestGemmBatched checks the strided-batched product against a float64
// reference: row-major batches of A [m, k] times B [n, k]ᵀ, laid out for
// cuBLAS's column-major convention as the device's products are (Cᵀ = B·Aᵀ),
// with float32 and bf16 inputs and a C stride larger than one matrix.
func TestGemmBatched(t *testing.T) {
	d := openTest(t)
	r := rand.New(rand.NewPCG(3, 4))
	const batch, m, n, k, cStride = 3, 5, 7, 9, 5*7 + 4
	a, b := randVals(r, batch*m*k, 1), randVals(r, batch*n*k, 1)
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		ta, tb := devTensor(t, d, a, batch*m, k), devTensor(t, d, b, batch*n, k)
		ab, bb := a, b
		typ := 0 // CUDA_R_32F
		if dt == tensor.BF16 {
			typ = 14 // CUDA_R_16BF
			ca, err := d.Alloc(tensor.BF16, batch*m, k)
			if err != nil {
				t.Fatal(err)
			}
			cb, err := d.Alloc(tensor.BF16, batch*n, k)
			if err != nil {
				t.Fatal(err)
			}
			d.Cast(ca, ta)
			d.Cast(cb, tb)
			ta, tb = ca, cb
			ab, bb = roundBF16(a), roundBF16(b)
		}
		c, err := d.Alloc(tensor.F32, 1, batch*cStride)
		if err != nil {
			t.Fatal(err)
		}
		// Column-major: C' [n, m] = op(B') op(A') with B' = B as k x n
		// column-major (transposed), A' = A as k x m column-major.
		err = d.sh.drv.gemmBatched(true, false, n, m, k, 1,
			tensor.DeviceAddr(tb), typ, k, int64(n*k),
			tensor.DeviceAddr(ta), typ, k, int64(m*k),
			0, tensor.DeviceAddr(c), n, cStride, batch)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(d, c)
		for bi := 0; bi < batch; bi++ {
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					want, scale := 0.0, 0.0
					for p := 0; p < k; p++ {
						x := float64(ab[(bi*m+i)*k+p]) * float64(bb[(bi*n+j)*k+p])
						want += x
						scale += math.Abs(x)
					}
					if g := float64(got[bi*cStride+i*n+j]); math.Abs(g-want) > 1e-5*scale {
						t.Fatalf("%s batch %d C[%d,%d] = %g, want %g", dt, bi, i, j, g, want)
					}
				}
			}
		}
	}
}

// roundBF16 returns v rounded to bf16 and widened back.
func roundBF16(v []float32) []float32 {
	u := make([]uint16, len(v))
	tensor.F32ToBF16(u, v)
	out := make([]float32, len(v))
	tensor.BF16ToF32(out, u)
	return out
}
