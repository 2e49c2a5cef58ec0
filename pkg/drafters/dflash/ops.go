package dflash

import (
	"math"
	"runtime"
	"sync"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// The host ops the passes are built from, each forward beside its backward.
// Backward passes ACCUMULATE into the gradients they are given (a nil
// gradient is not needed), as pkg/nn's do.

// parallelRows splits [0, n) into chunks run on the processors when the
// work (n times perRow multiply-adds) is worth it.
func parallelRows(n, perRow int, f func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if workers <= 1 || n < 2 || n*perRow < 1<<16 {
		f(0, n)
		return
	}
	workers = min(workers, n)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*n/workers, (w+1)*n/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

// f32 views v's first rows*cols values as a host tensor.
func f32(v []float32, rows, cols int) tensor.Tensor {
	return cpu.HostTensor(v[:rows*cols], rows, cols)
}

// linear computes out[rows, o] = x[rows, in]·wᵀ for w [o, in] (a bias-free
// nn.Linear); out is overwritten, or added to when acc. In float32 with a
// CPU device (dev, whose memory is the host's) the device's BLAS runs it;
// otherwise (float64, the finite-difference checks) plain loops do.
func linear[T Float](dev tensor.Device, out, x, w []T, rows, in, o int, acc bool) {
	if o32, ok := any(out).([]float32); ok && dev != nil {
		dev.MatMul(f32(o32, rows, o), f32(any(x).([]float32), rows, in), f32(any(w).([]float32), o, in), false, true, 1, acc)
		return
	}
	parallelRows(rows, in*o, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr := x[r*in : (r+1)*in]
			orow := out[r*o : (r+1)*o]
			for j := range o {
				wj := w[j*in : (j+1)*in]
				var s T
				for k, v := range xr {
					s += v * wj[k]
				}
				if acc {
					orow[j] += s
				} else {
					orow[j] = s
				}
			}
		}
	})
}

// linearBackward accumulates linear's gradients given dout [rows, o]:
// dx += dout·w and dw += doutᵀ·x (through dev's BLAS as linear).
func linearBackward[T Float](dev tensor.Device, dx, dw, dout, x, w []T, rows, in, o int) {
	if d32, ok := any(dout).([]float32); ok && dev != nil {
		if dx != nil {
			dev.MatMul(f32(any(dx).([]float32), rows, in), f32(d32, rows, o), f32(any(w).([]float32), o, in), false, false, 1, true)
		}
		if dw != nil {
			dev.MatMul(f32(any(dw).([]float32), o, in), f32(d32, rows, o), f32(any(x).([]float32), rows, in), true, false, 1, true)
		}
		return
	}
	if dx != nil {
		parallelRows(rows, in*o, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				dxr := dx[r*in : (r+1)*in]
				for j, d := range dout[r*o : (r+1)*o] {
					if d == 0 {
						continue
					}
					wj := w[j*in : (j+1)*in]
					for k, v := range wj {
						dxr[k] += d * v
					}
				}
			}
		})
	}
	if dw != nil {
		parallelRows(o, in*rows, func(lo, hi int) {
			for j := lo; j < hi; j++ {
				dwj := dw[j*in : (j+1)*in]
				for r := range rows {
					d := dout[r*o+j]
					if d == 0 {
						continue
					}
					for k, v := range x[r*in : (r+1)*in] {
						dwj[k] += d * v
					}
				}
			}
		})
	}
}

// rmsNorm computes each of rows rows of width dim as x/sqrt(mean(x²)+eps)·w
// (Hugging Face's RMSNorm, the mean accumulated in float64); out may be x.
func rmsNorm[T Float](out, x, w []T, rows, dim int, eps float64) {
	for r := range rows {
		xr := x[r*dim : (r+1)*dim]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		inv := T(1 / math.Sqrt(ss/float64(dim)+eps))
		or := out[r*dim : (r+1)*dim]
		for k, v := range xr {
			or[k] = v * inv * w[k]
		}
	}
}

// rmsNormBackward accumulates rmsNorm's gradients at x and w given dout.
// With y = x·r·w, r = (mean(x²)+eps)^(-1/2):
// dx = r·(dout⊙w) − x·r³/dim·Σ(dout⊙w⊙x), dw = Σ_rows dout⊙x·r.
func rmsNormBackward[T Float](dx, dw, dout, x, w []T, rows, dim int, eps float64) {
	for r := range rows {
		xr, dr := x[r*dim:(r+1)*dim], dout[r*dim:(r+1)*dim]
		var ss, dot float64
		for k, v := range xr {
			ss += float64(v) * float64(v)
			dot += float64(dr[k]) * float64(w[k]) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(dim)+eps)
		c := T(dot * inv * inv * inv / float64(dim))
		ti := T(inv)
		if dx != nil {
			dxr := dx[r*dim : (r+1)*dim]
			for k, v := range xr {
				dxr[k] += ti*dr[k]*w[k] - v*c
			}
		}
		if dw != nil {
			for k, v := range xr {
				dw[k] += dr[k] * v * ti
			}
		}
	}
}

// ropeTable holds cos and sin of rotate_half RoPE (Hugging Face Llama and
// Qwen3's convention, neox style: value i < hd/2 pairs with i + hd/2 and
// turns by pos·θ^(-2i/hd)), one row of hd/2 per position, grown on demand.
type ropeTable struct {
	half     int
	inv      []float64
	cos, sin []float64
}

func newRopeTable(headDim int, theta float64) *ropeTable {
	t := &ropeTable{half: headDim / 2}
	for i := range t.half {
		t.inv = append(t.inv, math.Pow(theta, -float64(2*i)/float64(headDim)))
	}
	return t
}

// grow makes room for positions up to maxPos.
func (t *ropeTable) grow(maxPos int) {
	for p := len(t.cos) / t.half; p <= maxPos; p++ {
		for _, f := range t.inv {
			// Angles in float32 first, as Transformers computes
			// inv_freq·position in float32 before cos and sin.
			a := float64(float32(float64(p) * f))
			t.cos = append(t.cos, math.Cos(a))
			t.sin = append(t.sin, math.Sin(a))
		}
	}
}

// rope rotates x [rows, heads·hd] in place at positions pos; sign -1 rotates
// back (the backward pass: the transpose of a rotation).
func rope[T Float](t *ropeTable, x []T, rows, heads int, pos []int, sign float64) {
	hd := 2 * t.half
	for r := range rows {
		cs, sn := t.cos[pos[r]*t.half:(pos[r]+1)*t.half], t.sin[pos[r]*t.half:(pos[r]+1)*t.half]
		for h := range heads {
			v := x[(r*heads+h)*hd : (r*heads+h+1)*hd]
			for i := range t.half {
				a, b := v[i], v[i+t.half]
				c, s := T(cs[i]), T(sign*sn[i])
				v[i] = a*c - b*s
				v[i+t.half] = b*c + a*s
			}
		}
	}
}

// silu is z·sigmoid(z).
func silu(z float64) float64 { return z / (1 + math.Exp(-z)) }

// swiGLU computes a = silu(g)·u element-wise.
func swiGLU[T Float](a, g, u []T) {
	for i, z := range g {
		a[i] = T(silu(float64(z))) * u[i]
	}
}

// swiGLUBackward accumulates swiGLU's gradients at g and u given da.
func swiGLUBackward[T Float](dg, du, da, g, u []T) {
	for i, z := range g {
		zf := float64(z)
		sg := 1 / (1 + math.Exp(-zf))
		dg[i] += da[i] * u[i] * T(sg*(1+zf*(1-sg)))
		du[i] += da[i] * T(zf*sg)
	}
}
