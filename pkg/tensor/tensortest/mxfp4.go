package tensortest

import (
	"math"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// mxfp4Weight returns a random MXFP4 weight [n, k] (random bytes, scales
// 127 ± 10), its values in float64 from the format's definition, and the
// float32 weight of the same values.
func (e *env) mxfp4Weight(n, k int) (tensor.Weight, []float64, tensor.Weight) {
	e.t.Helper()
	blocks, scales := make([]uint8, n*k/2), make([]uint8, n*k/32)
	for i := range blocks {
		blocks[i] = uint8(e.r.Uint32())
	}
	for i := range scales {
		scales[i] = uint8(117 + e.r.IntN(21))
	}
	m, err := tensor.MXFP4Matrix(blocks, scales, n, k)
	if err != nil {
		e.t.Fatal(err)
	}
	// e2m1: sign bit 3, exponent bits 2-1 (bias 1; 0 is subnormal),
	// mantissa bit 0.
	fp4 := func(b uint8) float64 {
		ex, mt := float64(b>>1&3), float64(b&1)
		v := mt / 2
		if ex > 0 {
			v = (1 + mt/2) * math.Pow(2, ex-1)
		}
		if b&8 != 0 {
			v = -v
		}
		return v
	}
	w64, w32 := make([]float64, n*k), make([]float32, n*k)
	for i := range w64 {
		b := blocks[i/2]
		if i%2 == 1 {
			b >>= 4
		}
		w64[i] = fp4(b&15) * math.Ldexp(1, int(scales[i/32])-127)
		w32[i] = float32(w64[i])
	}
	return tensor.WeightOf(m), w64, tensor.WeightOf(tensor.F32Matrix(w32, n, k))
}

// mulTMXFP4: MulT by an MXFP4 weight (prepared with the others, as a
// model's are) is within tol of the float64 product over the values the
// format defines, with a bias added as a frozen linear layer adds it; is bit
// for bit the product by the same values as a float32 weight (the device
// widens the weight exactly and runs its float32 kernels); and up to
// FewRows rows gives a row the bits it gets alone. It never rounds its
// inputs.
func mulTMXFP4(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 31)
	for _, shape := range [][2]int{{70, 64}, {130, 96}} {
		n, k := shape[0], shape[1]
		w, w64, wf := e.mxfp4Weight(n, k)
		dev.PrepareWeights(&w, &wf)
		bv := e.rand(n, 1)
		bias, err := dev.Upload(tensor.F32Matrix(bv, 1, n))
		if err != nil {
			t.Fatal(err)
		}
		for _, rows := range []int{1, 3, tensor.FewRows, tensor.FewRows + 1, 130} {
			if dev.RoundsInputs(tensor.MXFP4, rows) {
				t.Fatalf("MulT of %d rows by an MXFP4 weight rounds its inputs", rows)
			}
			for _, acc := range []bool{false, true} {
				xv := e.rand(rows*k, 1)
				ov := e.rand(rows*n, 1)
				x, out, ref := e.tensor(xv, rows, k), e.tensor(ov, rows, n), e.tensor(ov, rows, n)
				dev.MulT(out, x, &w, acc)
				dev.MulT(ref, x, &wf, acc)
				e.same("MulT mxfp4 against its float32 weight", e.read(out), e.read(ref))
				dev.AddBias(out, bias)
				want, scale := make([]float64, rows*n), make([]float64, rows*n)
				for i := range rows {
					for j := range n {
						s, a := float64(bv[j]), math.Abs(float64(bv[j]))
						if acc {
							s, a = s+float64(ov[i*n+j]), a+math.Abs(float64(ov[i*n+j]))
						}
						for c := range k {
							p := float64(xv[i*k+c]) * w64[j*k+c]
							s += p
							a += math.Abs(p)
						}
						want[i*n+j], scale[i*n+j] = s, a
					}
				}
				e.near("MulT mxfp4 plus bias", e.read(out), want, scale)
				if rows > 1 && rows <= tensor.FewRows {
					one := e.tensor(ov[:n], 1, n)
					dev.MulT(one, x.RowRange(0, 1), &w, acc)
					dev.AddBias(one, bias)
					e.same("MulT mxfp4 row 0 alone", e.read(one), e.read(out)[:n])
				}
			}
		}
	}
}
