package tensortest

import (
	"math"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// fdTol is the relative tolerance of a float32 backward pass against central
// finite differences of its float64 forward reference with step fdStep: the
// differences' truncation error (about fdStep² times the third derivative,
// 1e-8 here) is far below float32's roundoff in the backward, which the
// tolerance bounds as tol does.
const (
	fdStep = 1e-4
	fdTol  = 1e-4
)

// gradFD returns the central finite differences of f at a float64 copy of
// x32.
func gradFD(x32 []float32, f func(x []float64) float64) []float64 {
	x := make([]float64, len(x32))
	for i, v := range x32 {
		x[i] = float64(v)
	}
	return Gradient(x, f)
}

// Gradient returns the central finite differences of f at x (step 1e-4), one
// coordinate at a time, restoring x: the float64 reference a backward pass
// is checked against.
func Gradient(x []float64, f func(x []float64) float64) []float64 {
	g := make([]float64, len(x))
	for i := range x {
		v := x[i]
		x[i] = v + fdStep
		up := f(x)
		x[i] = v - fdStep
		down := f(x)
		x[i] = v
		g[i] = (up - down) / (2 * fdStep)
	}
	return g
}

// checkGrad fails unless got - before (a backward pass accumulates into
// random gradients, before) is within fdTol of want, relative to the larger
// of 1 and the finite difference.
func (e *env) checkGrad(what string, got, before []float32, want []float64) {
	e.t.Helper()
	for i := range want {
		d := float64(got[i]) - float64(before[i])
		if math.Abs(d-want[i]) > fdTol*math.Max(1, math.Abs(want[i])) {
			e.t.Fatalf("%s: gradient %d is %v, finite differences give %v", what, i, d, want[i])
		}
	}
}

// dot64 returns Σ r[i]·y[i], the loss whose gradient the backward checks
// take: a random projection of an op's output.
func dot64(r []float32, y []float64) float64 {
	var s float64
	for i, v := range y {
		s += float64(r[i]) * v
	}
	return s
}

func matMul(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 20)
	for _, m := range []int{1, 3, tensor.FewRows, 70} {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, acc := range []bool{false, true} {
				transA, transB := tr[0], tr[1]
				n, k := 37, 29
				alpha := float32(1)
				if acc {
					alpha = -0.75
				}
				av, bv, ov := e.rand(m*k, 1), e.rand(k*n, 1), e.rand(m*n, 1)
				a := e.tensor(av, m, k)
				if transA {
					a = e.tensor(av, k, m)
				}
				b := e.tensor(bv, k, n)
				if transB {
					b = e.tensor(bv, n, k)
				}
				out := e.tensor(ov, m, n)
				dev.MatMul(out, a, b, transA, transB, alpha, acc)
				at := func(i, c int) float64 {
					if transA {
						return float64(av[c*m+i])
					}
					return float64(av[i*k+c])
				}
				bt := func(c, j int) float64 {
					if transB {
						return float64(bv[j*k+c])
					}
					return float64(bv[c*n+j])
				}
				want, scale := make([]float64, m*n), make([]float64, m*n)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						var s, sa float64
						for c := 0; c < k; c++ {
							p := float64(alpha) * at(i, c) * bt(c, j)
							s += p
							sa += math.Abs(p)
						}
						if acc {
							s += float64(ov[i*n+j])
							sa += math.Abs(float64(ov[i*n+j]))
						}
						want[i*n+j], scale[i*n+j] = s, sa
					}
				}
				e.near("MatMul", e.read(out), want, scale)
				if !transA && transB && !acc && m <= tensor.FewRows {
					// A trainer's forward product computes what MulT does.
					w := tensor.WeightOf(tensor.F32Matrix(bv, n, k))
					viaW := e.tensor(ov, m, n)
					dev.MulT(viaW, a, &w, false)
					e.same("MatMul a·bᵀ against MulT", e.read(out), e.read(viaW))
				}
			}
		}
	}
}

func rmsNormBackward(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 21)
	rows, n, eps := 5, 24, float32(1e-5)
	xv, wv, rv := e.rand(rows*n, 2), e.rand(n, 1), e.rand(rows*n, 1)
	dxv, dwv := e.rand(rows*n, 1), e.rand(n, 1)
	fwd := func(x, w []float64) []float64 {
		y := make([]float64, rows*n)
		for r := 0; r < rows; r++ {
			var ss float64
			for _, v := range x[r*n : r*n+n] {
				ss += v * v
			}
			s := 1 / math.Sqrt(ss/float64(n)+float64(eps))
			for i := 0; i < n; i++ {
				y[r*n+i] = x[r*n+i] * s * w[i]
			}
		}
		return y
	}
	w64 := make([]float64, n)
	for i, v := range wv {
		w64[i] = float64(v)
	}
	x64 := make([]float64, len(xv))
	for i, v := range xv {
		x64[i] = float64(v)
	}
	wantDX := gradFD(xv, func(x []float64) float64 { return dot64(rv, fwd(x, w64)) })
	wantDW := gradFD(wv, func(w []float64) float64 { return dot64(rv, fwd(x64, w)) })
	x, w, dout := e.tensor(xv, rows, n), e.tensor(wv, 1, n), e.tensor(rv, rows, n)
	dx, dw := e.tensor(dxv, rows, n), e.tensor(dwv, 1, n)
	dev.RMSNormBackward(dx, dw, dout, x, w, eps)
	e.checkGrad("RMSNormBackward dx", e.read(dx), dxv, wantDX)
	e.checkGrad("RMSNormBackward dw", e.read(dw), dwv, wantDW)
	// Either gradient alone gives the same values.
	dwOnly := e.tensor(dwv, 1, n)
	dev.RMSNormBackward(tensor.Tensor{}, dwOnly, dout, x, w, eps)
	e.same("RMSNormBackward dw alone", e.read(dwOnly), e.read(dw))
}

// ropeBackward checks that RoPEBackward is RoPE's transpose: <RoPE(x), y> =
// <x, RoPEBackward(y)>, at positions inside and past the tables, and that it
// undoes RoPE.
func ropeBackward(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 22)
	const hd, heads, maxPos = 8, 2, 4
	rot := e.rotary(hd, maxPos)
	pos := []int32{1, 3, 9}
	rows, w := len(pos), heads*hd
	pt, _ := dev.Alloc(tensor.I32, rows, 1)
	dev.WriteI32(pt, pos)
	xv, yv := e.rand(rows*w, 1), e.rand(rows*w, 1)
	x, y := e.tensor(xv, rows, w), e.tensor(yv, rows, w)
	dev.RoPE(x, heads, pt, rot)
	dev.RoPEBackward(y, heads, pt, rot)
	var lhs, rhs, scale float64
	rx, ry := e.read(x), e.read(y)
	for i := range xv {
		lhs += float64(rx[i]) * float64(yv[i])
		rhs += float64(xv[i]) * float64(ry[i])
		scale += math.Abs(float64(xv[i]) * float64(yv[i]))
	}
	if math.Abs(lhs-rhs) > tol*scale {
		t.Fatalf("RoPEBackward is not RoPE's transpose: <RoPE(x), y> = %v, <x, RoPEBackward(y)> = %v", lhs, rhs)
	}
	dev.RoPEBackward(x, heads, pt, rot)
	want := make([]float64, len(xv))
	for i, v := range xv {
		want[i] = float64(v)
	}
	e.near("RoPEBackward undoes RoPE", e.read(x), want, nil)
}

func activationBackward(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 23)
	silu := func(g float64) float64 { return g / (1 + math.Exp(-g)) }
	for _, n := range []int{37, 70000} { // inline, and split over the workers
		gv, uv, rv := e.rand(n, 2), e.rand(n, 1), e.rand(n, 1)
		dgv, duv := e.rand(n, 1), e.rand(n, 1)
		gate, up, dout := e.tensor(gv, 1, n), e.tensor(uv, 1, n), e.tensor(rv, 1, n)
		dgate, dup := e.tensor(dgv, 1, n), e.tensor(duv, 1, n)
		dev.SwiGLUBackward(dgate, dup, dout, gate, up)
		// Element i of the loss Σ r·silu(g)·u depends on g[i] and u[i]
		// alone: its derivatives are one-coordinate finite differences.
		wantDG, wantDU := make([]float64, n), make([]float64, n)
		for i := range gv {
			g, u, r := float64(gv[i]), float64(uv[i]), float64(rv[i])
			wantDG[i] = r * u * (silu(g+fdStep) - silu(g-fdStep)) / (2 * fdStep)
			wantDU[i] = r * silu(g)
		}
		e.checkGrad("SwiGLUBackward dgate", e.read(dgate), dgv, wantDG)
		e.checkGrad("SwiGLUBackward dup", e.read(dup), duv, wantDU)
		dupOnly := e.tensor(duv, 1, n)
		dev.SwiGLUBackward(tensor.Tensor{}, dupOnly, dout, gate, up)
		e.same("SwiGLUBackward dup alone", e.read(dupOnly), e.read(dup))

		ov := e.rand(n, 1)
		out := e.tensor(ov, 1, n)
		dev.AddSiLU(out, gate)
		want := make([]float64, n)
		for i, g := range gv {
			want[i] = float64(ov[i]) + silu(float64(g))
		}
		e.near("AddSiLU", e.read(out), want, nil)
		dz := e.tensor(dgv, 1, n)
		dev.SiLUBackward(dz, dout, gate)
		for i := range gv {
			g := float64(gv[i])
			want[i] = float64(rv[i]) * (silu(g+fdStep) - silu(g-fdStep)) / (2 * fdStep)
		}
		e.checkGrad("SiLUBackward", e.read(dz), dgv, want)
	}
}

func arrange(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 24)
	rows := 4
	av, bv := e.rand(rows*3, 1), e.rand(rows*2, 1)
	a, b := e.tensor(av, rows, 3), e.tensor(bv, rows, 2)
	cat, _ := dev.Alloc(tensor.F32, rows, 5)
	dev.ConcatCols(cat, []tensor.Tensor{a, b})
	got := e.read(cat)
	for r := 0; r < rows; r++ {
		e.same("ConcatCols", got[r*5:r*5+5], append(append([]float32(nil), av[r*3:r*3+3]...), bv[r*2:r*2+2]...))
	}
	a2, _ := dev.Alloc(tensor.F32, rows, 3)
	b2, _ := dev.Alloc(tensor.F32, rows, 2)
	dev.SplitCols(cat, []tensor.Tensor{a2, b2})
	e.same("SplitCols after ConcatCols", e.read(a2), av)
	e.same("SplitCols after ConcatCols", e.read(b2), bv)

	dv := e.rand(3, 1)
	d := e.tensor(dv, 1, 3)
	dev.SumRows(d, a)
	dev.Add(a, a2)
	want, twice := make([]float64, 3), make([]float64, rows*3)
	for j := range want {
		want[j] = float64(dv[j])
		for r := 0; r < rows; r++ {
			want[j] += float64(av[r*3+j])
		}
	}
	for i, v := range av {
		twice[i] = 2 * float64(v)
	}
	e.near("SumRows", e.read(d), want, nil)
	e.near("Add", e.read(a), twice, nil)
}
