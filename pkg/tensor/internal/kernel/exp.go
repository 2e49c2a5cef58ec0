package kernel

import "math"

// ExpShift replaces each x[i] by e^(x[i]-shift) and returns their sum: the
// numerators of a softmax whose shift is the row's maximum, so that every
// argument is <= 0 (an argument below float32's underflow, or NaN, gives 0).
// e^v is computed in float32 by a range reduction by ln 2 and a degree-5
// polynomial (within a few ulp of math.Exp), eight at a time in assembly
// where the processor has AVX2, with the same operations per element in the
// scalar tail.
func ExpShift(x []float32, shift float32) float32 {
	done, sum := expShiftVec(x, shift)
	for i, v := range x[done:] {
		i += done
		v -= shift
		if !(v > -87.33654) {
			x[i] = 0
			continue
		}
		t := v*1.44269504088896341 - 0.5 // v <= 0: round to nearest by truncation
		ki := int32(t)
		k := float32(ki)
		r := v - k*0.693359375
		r -= k * -2.12194440e-4
		p := float32(1.9875691500e-4)
		p = p*r + 1.3981999507e-3
		p = p*r + 8.3334519073e-3
		p = p*r + 4.1665795894e-2
		p = p*r + 1.6666665459e-1
		p = p*r + 5.0000001201e-1
		y := (p*r*r + r + 1) * math.Float32frombits(uint32(ki+127)<<23)
		x[i] = y
		sum += y
	}
	return sum
}
