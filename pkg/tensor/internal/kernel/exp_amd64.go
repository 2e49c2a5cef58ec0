//go:build !purego

package kernel

import "golang.org/x/sys/cpu"

// expShiftAVX2 is the vector body of ExpShift over n elements (a positive
// multiple of 8); the lanes' partial sums are added to sums.
//
//go:noescape
func expShiftAVX2(x *float32, n int, shift float32, sums *[8]float32)

// expShiftVec runs the vector body of ExpShift and returns how many elements
// it covered and their sum: all of x with AVX-512 (the last block masked),
// else the longest multiple-of-8 prefix with AVX2.
func expShiftVec(x []float32, shift float32) (int, float32) {
	if len(x) > 0 && cpu.X86.HasAVX512F {
		var s [16]float32
		expShiftAVX512(&x[0], len(x), shift, &s)
		return len(x), (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) +
			(((s[8] + s[9]) + (s[10] + s[11])) + ((s[12] + s[13]) + (s[14] + s[15])))
	}
	n := len(x) &^ 7
	if n == 0 || !cpu.X86.HasAVX2 {
		return 0, 0
	}
	var sums [8]float32
	expShiftAVX2(&x[0], n, shift, &sums)
	return n, ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]))
}

//go:noescape
func maxAVX2(x *float32, n int, init float32) float32

// expShiftAVX512 is expShiftAVX2 in sixteen lanes, for any n >= 1 (see
// exp_amd64.s).
//
//go:noescape
func expShiftAVX512(x *float32, n int, shift float32, sums *[16]float32)

// maxAVX512 is maxAVX2 in sixteen lanes, for any n >= 1.
//
//go:noescape
func maxAVX512(x *float32, n int, init float32) float32

//go:noescape
func scaleAVX2(x *float32, n int, s float32)

// maxVec returns the largest non-NaN element among init and a prefix of x,
// and the prefix length: all of x with AVX-512, else the longest
// multiple-of-8 prefix with AVX2 (0 without).
func maxVec(x []float32, init float32) (int, float32) {
	if len(x) > 0 && cpu.X86.HasAVX512F {
		return len(x), maxAVX512(&x[0], len(x), init)
	}
	n := len(x) &^ 7
	if n == 0 || !cpu.X86.HasAVX2 {
		return 0, init
	}
	return n, maxAVX2(&x[0], n, init)
}

// scaleVec multiplies the longest multiple-of-8 prefix of x by s and returns
// its length (0 without AVX2).
func scaleVec(x []float32, s float32) int {
	n := len(x) &^ 7
	if n == 0 || !cpu.X86.HasAVX2 {
		return 0
	}
	scaleAVX2(&x[0], n, s)
	return n
}

//go:noescape
func swigluAVX2(out, gate, up *float32, n int) int

// swigluVec runs swiglu's vector body over x's longest multiple-of-8 prefix
// and returns how many elements it wrote: fewer when a block of eight holds a
// value whose exponential needs the scalar loop's edge cases.
func swigluVec(out, gate, up []float32) int {
	n := len(gate) &^ 7
	if n == 0 || !cpu.X86.HasAVX2 {
		return 0
	}
	_, _ = out[n-1], up[n-1]
	return swigluAVX2(&out[0], &gate[0], &up[0], n)
}
