//go:build !purego

package kernel

import "golang.org/x/sys/cpu"

// The vector bodies of the conversions in half.go (see half_amd64.s): n
// vectors of sixteen values (AVX512) or eight (AVX2, F16C).

//go:noescape
func bf16ToF32AVX512(dst *float32, src *uint16, n int)

//go:noescape
func bf16ToF32AVX2(dst *float32, src *uint16, n int)

//go:noescape
func f16ToF32AVX512(dst *float32, src *uint16, n int)

//go:noescape
func f16ToF32F16C(dst *float32, src *uint16, n int)

//go:noescape
func f32ToBF16AVX512(dst *uint16, src *float32, n int)

//go:noescape
func f32ToBF16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func f32ToF16AVX512(dst *uint16, src *float32, n int)

//go:noescape
func f32ToF16F16C(dst *uint16, src *float32, n int)

// convWidth returns the values a conversion body takes at a time: sixteen
// with AVX-512, eight with the AVX2 (or, with f16c, F16C) bodies, 0 where
// there are none.
func convWidth(f16c bool) int {
	switch {
	case cpu.X86.HasAVX512F:
		return 16
	case f16c && cpu.X86.HasF16C && cpu.X86.HasAVX:
		return 8
	case !f16c && cpu.X86.HasAVX2:
		return 8
	}
	return 0
}

// convLen returns how many of n values the vector bodies convert (a
// multiple of their width, 0 where there are none) and whether the
// sixteen-lane (AVX-512) bodies run; f16c says the conversion needs F16C
// where AVX-512 is missing.
func convLen(n int, f16c bool) (int, bool) {
	v := convWidth(f16c)
	if v == 0 {
		return 0, false
	}
	return n - n%v, v == 16
}

// bf16ToF32Vec converts the longest prefix of src it can with vector
// instructions and returns its length; f16ToF32Vec, f32ToBF16Vec and
// f32ToF16Vec likewise.
func bf16ToF32Vec(dst []float32, src []uint16) int {
	n, z := convLen(len(src), false)
	if z && n > 0 {
		bf16ToF32AVX512(&dst[0], &src[0], n/16)
	} else if n > 0 {
		bf16ToF32AVX2(&dst[0], &src[0], n/8)
	}
	return n
}

func f16ToF32Vec(dst []float32, src []uint16) int {
	n, z := convLen(len(src), true)
	if z && n > 0 {
		f16ToF32AVX512(&dst[0], &src[0], n/16)
	} else if n > 0 {
		f16ToF32F16C(&dst[0], &src[0], n/8)
	}
	return n
}

func f32ToBF16Vec(dst []uint16, src []float32) int {
	n, z := convLen(len(src), false)
	if z && n > 0 {
		f32ToBF16AVX512(&dst[0], &src[0], n/16)
	} else if n > 0 {
		f32ToBF16AVX2(&dst[0], &src[0], n/8)
	}
	return n
}

func f32ToF16Vec(dst []uint16, src []float32) int {
	n, z := convLen(len(src), true)
	if z && n > 0 {
		f32ToF16AVX512(&dst[0], &src[0], n/16)
	} else if n > 0 {
		f32ToF16F16C(&dst[0], &src[0], n/8)
	}
	return n
}
