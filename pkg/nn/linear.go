package nn

import "github.com/drafter-ai/drafter/pkg/tensor"

// Linear computes out[rows, outF] = x[rows, in] * w[outF, in]^T + b, the layout of
// a Hugging Face nn.Linear weight. b may be nil.
func Linear(be tensor.Backend, out, x, w, b []float32, rows, in, outF int) {
	tensor.MatMulT(be, out[:rows*outF], x[:rows*in], w[:outF*in], rows, outF, in)
	if b != nil {
		for r := 0; r < rows; r++ {
			o := out[r*outF : r*outF+outF]
			for j, bj := range b[:outF] {
				o[j] += bj
			}
		}
	}
}

// LinearBackward accumulates dx += dout*w, dw += dout^T*x and db += sum of dout's
// rows; any of dx, dw, db may be nil.
func LinearBackward(be tensor.Backend, dx, dw, db, dout, x, w []float32, rows, in, outF int) {
	if dx != nil {
		be.Sgemm(false, false, rows, in, outF, 1, dout, outF, w, in, 1, dx, in)
	}
	if dw != nil {
		be.Sgemm(true, false, outF, in, rows, 1, dout, outF, x, in, 1, dw, in)
	}
	if db != nil {
		for r := 0; r < rows; r++ {
			d := dout[r*outF : r*outF+outF]
			for j, v := range d {
				db[j] += v
			}
		}
	}
}
