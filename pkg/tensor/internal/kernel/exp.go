package kernel

import "math"

// ExpShift replaces each x[i] by e^(x[i]-shift) and returns their sum: the
// numerators of a softmax whose shift is the row's maximum, so that every
// argument is <= 0 (an argument below float32's underflow, or NaN, gives 0).
// e^v is computed in float32 by a range reduction by ln 2 and a degree-5
// polynomial (within a few ulp of math.Exp), eight at a time in assembly
// where the processor has AVX2 with Expf's operations, and by Expf in the
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
		y := Expf(v)
		x[i] = y
		sum += y
	}
	return sum
}

// Expf is exp for float32 to within about 2 ulp: Cody-Waite range reduction
// x = k·ln2 + r, |r| <= ln2/2, a degree-6 polynomial for e^r (the Cephes expf
// coefficients) and the 2^k scale built in the exponent bits. It is several
// times faster than math.Exp, which matters in the softmax and SiLU loops.
func Expf(x float32) float32 {
	if !(x > -87.33654) { // also NaN, which stays NaN below
		if x != x {
			return x
		}
		return 0
	}
	if x > 88.72283 {
		return float32(math.Inf(1))
	}
	// k = round(x / ln2), by truncating x/ln2 ± 0.5.
	t := x * 1.44269504088896341
	if t < 0 {
		t -= 0.5
	} else {
		t += 0.5
	}
	ki := int32(t)
	k := float32(ki)
	r := x - k*0.693359375
	r -= k * -2.12194440e-4
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	y := p*r*r + r + 1
	if ki < -126 { // subnormal result: scale in two steps
		return y * math.Float32frombits(uint32(ki+126+127)<<23) * math.Float32frombits(1<<23)
	}
	if ki > 127 { // x in (88.38, 88.72]: 2^128 is not a float32, scale in two steps
		return y * math.Float32frombits(uint32(ki-1+127)<<23) * 2
	}
	return y * math.Float32frombits(uint32(ki+127)<<23)
}

// Softmax turns x into softmax(x) in place. -Inf entries become 0; NaN
// elements are skipped by the maximum.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	Scale(x, 1/SoftmaxUnscaled(x))
}

// SoftmaxUnscaled replaces x by e^(x - max x) and returns their sum: the
// numerators of softmax(x) and their denominator, for a caller that divides
// a smaller result instead (attention scales its P·V output). x must not be
// empty.
func SoftmaxUnscaled(x []float32) float32 {
	mx := x[0]
	done := 0
	if mx == mx { // a NaN first element stays the maximum, as in the loop below
		done, mx = maxVec(x, mx)
	}
	for _, v := range x[done:] {
		if v > mx {
			mx = v
		}
	}
	return ExpShift(x, mx)
}

// Scale multiplies x by s in place, eight at a time where the processor
// allows.
func Scale(x []float32, s float32) {
	for i := scaleVec(x, s); i < len(x); i++ {
		x[i] *= s
	}
}

// SwiGLU computes out = silu(gate) * up element-wise; out may alias gate.
// silu(g) = g / (1 + Expf(-g)). Where the processor has vector instructions
// (swigluVec), they compute the same values, Expf's operations step for step,
// eight at a time, leaving blocks with edge cases and the tail to a scalar
// loop.
func SwiGLU(out, gate, up []float32) {
	up = up[:len(gate)]
	out = out[:len(gate)]
	for done := 0; done < len(gate); {
		done += swigluVec(out[done:], gate[done:], up[done:])
		end := min(done+8, len(gate)) // a block the vector body left, or the tail
		swigluScalar(out[done:end], gate[done:end], up[done:end])
		done = end
	}
}

// swigluScalar is SwiGLU's scalar loop.
func swigluScalar(out, gate, up []float32) {
	up = up[:len(gate)]
	out = out[:len(gate)]
	for i, g := range gate {
		e := Expf(-g)
		out[i] = g / (1 + e) * up[i]
	}
}
