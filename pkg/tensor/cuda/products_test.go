package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestBF16Products: MatMul on a device WithProducts(BF16Products) returned
// is the product of its operands rounded to bf16 (nearest even; the
// reference rounds with tensor.BF16Bits, not the stand-in's code) summed in
// float32: within float32 accumulation's bound (k+2)·2^-24 of the float64
// sum of the rounded values' products, for every transposition, alpha and
// accumulation, on any GPU order; and it is not the float32 product (the
// rounding is there). The few-row path, MulT and an F32Products sibling
// compute exactly what the device itself does, and a sibling of the bf16
// device keeps its products.
func TestBF16Products(t *testing.T) {
	d := openTest(t)
	bd, err := d.WithProducts(tensor.BF16Products)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := d.WithProducts(tensor.F32Products)
	if err != nil {
		t.Fatal(err)
	}
	bf := func(v float32) float64 { return float64(tensor.BF16Float(tensor.BF16Bits(v))) }
	r := rand.New(rand.NewPCG(3, 4))
	const m, n, k = tensor.FewRows + 13, 29, 70 // above FewRows: cuBLAS, not the few-row kernel
	for _, c := range []struct {
		transA, transB, acc bool
		alpha               float32
	}{{false, true, false, 1}, {false, false, true, 0.75}, {true, false, true, -1.5}, {true, true, false, 2}} {
		ar, ac := m, k
		if c.transA {
			ar, ac = k, m
		}
		br, bc := k, n
		if c.transB {
			br, bc = n, k
		}
		av, bv, ov := randVals(r, ar*ac, 1), randVals(r, br*bc, 1), randVals(r, m*n, 1)
		a, b := devTensor(t, d, av, ar, ac), devTensor(t, d, bv, br, bc)
		run := func(dev tensor.Device) []float32 {
			out := devTensor(t, d, ov, m, n)
			dev.MatMul(out, a, b, c.transA, c.transB, c.alpha, c.acc)
			return readAll(d, out)
		}
		got, f32, plain := run(bd), run(fd), run(d)
		if !equalBits(f32, plain) {
			t.Errorf("%+v: MatMul of the F32Products sibling differs from the device's", c)
		}
		at := func(i, l int) float32 {
			if c.transA {
				return av[l*m+i]
			}
			return av[i*k+l]
		}
		bt := func(l, j int) float32 {
			if c.transB {
				return bv[j*k+l]
			}
			return bv[l*n+j]
		}
		rounded := 0 // outputs further from the float32 product than float32 sums can be
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s, s32, mag float64
				for l := 0; l < k; l++ {
					s += bf(at(i, l)) * bf(bt(l, j))
					s32 += float64(at(i, l)) * float64(bt(l, j))
					mag += math.Abs(bf(at(i, l)) * bf(bt(l, j)))
				}
				want, want32 := float64(c.alpha)*s, float64(c.alpha)*s32
				bound := float64(k+2) * 0x1p-24 * math.Abs(float64(c.alpha)) * mag
				if c.acc {
					want += float64(ov[i*n+j])
					want32 += float64(ov[i*n+j])
					bound += 2 * 0x1p-24 * math.Abs(float64(ov[i*n+j]))
				}
				g := float64(got[i*n+j])
				if math.Abs(g-want) > bound {
					t.Fatalf("%+v: out[%d,%d] = %g, want %g (bf16 operands) within %g", c, i, j, g, want, bound)
				}
				if math.Abs(g-want32) > 2*bound {
					rounded++
				}
			}
		}
		if rounded < m*n/2 {
			t.Errorf("%+v: only %d of %d outputs differ from the float32 product beyond float32's bound: the operands were not rounded to bf16", c, rounded, m*n)
		}
	}

	// The few-row path (a·bᵀ, alpha 1, at most FewRows rows) and MulT, the
	// products of a model's forward, are the device's own, bit for bit; a
	// sibling of the bf16 device multiplies as it does.
	for _, rows := range []int{tensor.FewRows, tensor.FewRows + 5} {
		xv, wv := randVals(r, rows*k, 1), randVals(r, n*k, 1)
		x, w := devTensor(t, d, xv, rows, k), devTensor(t, d, wv, n, k)
		weight := tensor.WeightOf(tensor.F32Matrix(wv, n, k))
		mulT := func(dev tensor.Device) []float32 {
			out := devTensor(t, d, make([]float32, rows*n), rows, n)
			dev.MulT(out, x, &weight, false)
			return readAll(d, out)
		}
		if !equalBits(mulT(bd), mulT(d)) {
			t.Errorf("%d rows: MulT on the bf16-products device differs from the device's", rows)
		}
		matMul := func(dev tensor.Device) []float32 {
			out := devTensor(t, d, make([]float32, rows*n), rows, n)
			dev.MatMul(out, x, w, false, true, 1, false)
			return readAll(d, out)
		}
		if few := rows <= tensor.FewRows; few != equalBits(matMul(bd), matMul(d)) {
			t.Errorf("%d rows: MatMul a·bᵀ on the bf16-products device equal to the device's: %v, want %v (the few-row kernel keeps float32)", rows, !few, few)
		}
		if !equalBits(matMul(bd.Sibling()), matMul(bd)) {
			t.Errorf("%d rows: a sibling of the bf16-products device multiplies otherwise", rows)
		}
	}
}

// equalBits reports whether a and b hold the same float32 bits.
func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
