package cpu

import "github.com/drafter-ai/drafter/pkg/tensor"

// SampleRows draws each row's token with tensor.SampleRow, the reference
// rule, so that sampling through the device gives pkg/sample's tokens bit
// for bit. The rows run in order on the calling goroutine: a decode step
// samples a batch's few rows, each one pass or three over the vocabulary.
func (c *Device) SampleRows(ids []int32, logits tensor.Tensor, temperature float64, u []float64) {
	tensor.CheckSampleRows("SampleRows", ids, logits, temperature, u)
	x, n := f32s(logits), logits.Cols()
	for r := 0; r < logits.Rows(); r++ {
		var ur float64
		if temperature != 0 {
			ur = u[r]
		}
		ids[r] = tensor.SampleRow(x[r*n:r*n+n], temperature, ur)
	}
}
