package tensor

import (
	"fmt"
	"math"
)

// SampleRow returns the token Device.SampleRows draws from one row of
// logits at temperature with the uniform u in [0, 1), or -1 when the row
// holds a NaN or +Inf value or only -Inf values (nothing to draw from).
// Temperature 0 is the argmax, the first of equal largest values, and
// ignores u. Otherwise it is pkg/sample's rule without top-k, top-p or
// min-p, in its arithmetic: p_i = float32(e_i)·(1/Σe) rounded to float32,
// e_i = exp((logit_i - max)/temperature) in float64 (-Inf entries get 0),
// then the inverse transform over the p_i in index order against
// u·Σ float64(p_i), the last nonzero token when u rounds past the end. It is
// the CPU device's SampleRows and the reference of the devices'
// conformance; pkg/sample's tests check it against Sampler.Sample bit for
// bit. It allocates nothing: the exponentials are recomputed per pass
// (math.Exp is a function of its argument, so every pass sees the same
// values).
func SampleRow(row []float32, temperature, u float64) int32 {
	if len(row) == 0 {
		return -1
	}
	best, mx := 0, row[0]
	for i, v := range row {
		if v != v || v > math.MaxFloat32 {
			return -1
		}
		if v > mx {
			best, mx = i, v
		}
	}
	if mx < -math.MaxFloat32 {
		return -1
	}
	if temperature == 0 {
		return int32(best)
	}
	invT := 1 / temperature
	m := float64(mx)
	var sum float64
	for _, v := range row {
		if v >= -math.MaxFloat32 {
			sum += math.Exp((float64(v) - m) * invT)
		}
	}
	inv := 1 / sum
	prob := func(v float32) float64 {
		if v < -math.MaxFloat32 {
			return 0
		}
		return float64(float32(float64(float32(math.Exp((float64(v)-m)*invT))) * inv))
	}
	var total float64
	for _, v := range row {
		total += prob(v)
	}
	target := u * total
	var cum float64
	last := int32(-1)
	for i, v := range row {
		p := prob(v)
		if p == 0 {
			continue
		}
		cum += p
		if target < cum {
			return int32(i)
		}
		last = int32(i)
	}
	return last
}

// CheckSampleRows panics unless Device.SampleRows(ids, logits, temperature,
// u) is a valid call: logits float32 with at least one column, ids and (at
// a temperature above 0) u holding a value per row, temperature finite and
// not negative, every u in [0, 1). op names the device's op.
func CheckSampleRows(op string, ids []int32, logits Tensor, temperature float64, u []float64) {
	rows := logits.Rows()
	if logits.DType() != F32 || (rows > 0 && logits.Cols() == 0) || len(ids) < rows {
		panic(fmt.Sprintf("tensor: %s of a %dx%d %s tensor into %d ids", op, rows, logits.Cols(), logits.DType(), len(ids)))
	}
	if !(temperature >= 0) || math.IsInf(temperature, 1) {
		panic(fmt.Sprintf("tensor: %s at temperature %v, want 0 (argmax) or finite positive", op, temperature))
	}
	if temperature == 0 {
		return
	}
	if len(u) < rows {
		panic(fmt.Sprintf("tensor: %s of %d rows with %d uniforms", op, rows, len(u)))
	}
	for _, x := range u[:rows] {
		if !(x >= 0 && x < 1) {
			panic(fmt.Sprintf("tensor: %s with the uniform %v, want [0, 1)", op, x))
		}
	}
}
