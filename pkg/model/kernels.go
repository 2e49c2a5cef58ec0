package model

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The element-wise kernels of the forward pass, in float32 with the checks
// hoisted out of the loops. They match pkg/nn's definitions (RMSNorm sums the
// squares in float64, as Transformers' float32 upcast does at this precision);
// they exist here because the decode loop must not allocate, and nn's
// versions spawn goroutines per call.

func sqrt64(x float64) float64 { return math.Sqrt(x) }

// rmsNormRows normalises rows [lo, hi) of x [.., n] into out with weight w.
// out may alias x.
func rmsNormRows(out, x, w []float32, lo, hi, n int, eps float32) {
	w = w[:n]
	for r := lo; r < hi; r++ {
		xr := x[r*n : r*n+n]
		or := out[r*n : r*n+n]
		var ss float64
		for _, v := range xr {
			ss += float64(v) * float64(v)
		}
		rs := float32(1 / math.Sqrt(ss/float64(n)+float64(eps)))
		for i, v := range xr {
			or[i] = v * rs * w[i]
		}
	}
}

// swiglu computes out = silu(gate) * up element-wise; out may alias gate.
// silu(g) = g / (1 + expf(-g)), with expf's body written out in the loop so
// that the processor overlaps consecutive elements; the arithmetic is expf's,
// step for step, so the results are the same as calling it.
//
// Where the processor has vector instructions (swigluVec), they compute the
// same values eight at a time, leaving blocks with edge cases to this loop.
func swiglu(out, gate, up []float32) {
	up = up[:len(gate)]
	out = out[:len(gate)]
	for done := 0; done < len(gate); {
		done += swigluVec(out[done:], gate[done:], up[done:])
		end := min(done+8, len(gate)) // a block the vector body left, or the tail
		swigluScalar(out[done:end], gate[done:end], up[done:end])
		done = end
	}
}

// swigluScalar is swiglu's scalar loop.
func swigluScalar(out, gate, up []float32) {
	up = up[:len(gate)]
	out = out[:len(gate)]
	for i, g := range gate {
		x := -g
		var e float32
		switch {
		case !(x > -87.33654):
			e = 0
			if x != x {
				e = x
			}
		case x > 88.72283:
			e = float32(math.Inf(1))
		default:
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
			if ki < -126 {
				e = y * math.Float32frombits(uint32(ki+126+127)<<23) * math.Float32frombits(1<<23)
			} else if ki > 127 {
				e = y * math.Float32frombits(uint32(ki-1+127)<<23) * 2
			} else {
				e = y * math.Float32frombits(uint32(ki+127)<<23)
			}
		}
		out[i] = g / (1 + e) * up[i]
	}
}

// swigluRows computes rows [lo, hi) of out[r] = silu(gu[r][:I]) * gu[r][I:],
// where each row of gu holds the gate and up projections side by side.
func swigluRows(out, gu []float32, lo, hi, I int) {
	for r := lo; r < hi; r++ {
		swiglu(out[r*I:(r+1)*I], gu[2*r*I:(2*r+1)*I], gu[(2*r+1)*I:(2*r+2)*I])
	}
}

func addBias(out, b []float32) {
	n := len(b)
	for r := 0; r+n <= len(out); r += n {
		o := out[r : r+n]
		for i, v := range b {
			o[i] += v
		}
	}
}

// dot returns the inner product of a and b (len(b) >= len(a)).
func dot(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy computes y += a*x (len(x) >= len(y)).
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		y[i] += a * x[i]
		y[i+1] += a * x[i+1]
		y[i+2] += a * x[i+2]
		y[i+3] += a * x[i+3]
	}
	for ; i < len(y); i++ {
		y[i] += a * x[i]
	}
}

// expf is exp for float32 to within about 2 ulp: Cody-Waite range reduction
// x = k·ln2 + r, |r| <= ln2/2, a degree-6 polynomial for e^r (the Cephes expf
// coefficients) and the 2^k scale built in the exponent bits. It is several
// times faster than math.Exp, which matters in the softmax and SiLU loops.
func expf(x float32) float32 {
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

// softmaxRow turns x into softmax(x) in place. -Inf entries become 0.
func softmaxRow(x []float32) {
	if len(x) == 0 {
		return
	}
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
	inv := 1 / tensor.ExpShift(x, mx)
	done = scaleVec(x, inv)
	for i := range x[done:] {
		x[done+i] *= inv
	}
}
