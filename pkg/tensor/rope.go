package tensor

import "math"

// RoPEAngle returns the cosine and sine of position pos's angle for the
// inverse frequency invFreq as the reference computes them: the product
// pos·invFreq in float32 (as torch takes it), cos and sin in float64,
// rounded to float32.
func RoPEAngle(pos int, invFreq float32) (float32, float32) {
	a := float64(float32(pos) * invFreq)
	return float32(math.Cos(a)), float32(math.Sin(a))
}
