//go:build !purego

#include "textflag.h"

// Bulk conversions between float32 and the 16-bit formats (see half.go),
// n vectors of sixteen values (AVX-512) or eight (AVX2, F16C) each. Every
// body is the loop of half_amd64.h around its CSTEP.

// The constants of f32ToBF16's rounding: 1, 0x7fff, the magnitude mask,
// +Inf and the quiet bit of a bfloat16 NaN.
DATA bf16K<>+0(SB)/4, $1
DATA bf16K<>+4(SB)/4, $0x7fff
DATA bf16K<>+8(SB)/4, $0x7fffffff
DATA bf16K<>+12(SB)/4, $0x7f800000
DATA bf16K<>+16(SB)/4, $0x40
GLOBL bf16K<>(SB), RODATA|NOPTR, $20

#define CSETUP

// B2F, H2F and F2H are the steps of the bfloat16 and binary16 widenings and
// of the binary16 rounding over a vector register r: s bytes of the source,
// d bytes of the destination. VCVTPS2PH with immediate 0 rounds to nearest
// even whatever MXCSR says.
#define B2F(r, s, d) \
	VPMOVZXWD (SI), r \
	VPSLLD $16, r, r \
	VMOVUPS r, (DI) \
	ADDQ $s, SI \
	ADDQ $d, DI

#define H2F(r, s, d) \
	VCVTPH2PS (SI), r \
	VMOVUPS r, (DI) \
	ADDQ $s, SI \
	ADDQ $d, DI

#define F2H(r, s, d) \
	VMOVUPS (SI), r \
	VCVTPS2PH $0, r, (DI) \
	ADDQ $s, SI \
	ADDQ $d, DI

// func bf16ToF32AVX512(dst *float32, src *uint16, n int)
#define CSTEP B2F(Z0, 32, 64)
TEXT ·bf16ToF32AVX512(SB), NOSPLIT, $0-24
#include "half_amd64.h"

// func bf16ToF32AVX2(dst *float32, src *uint16, n int)
#undef CSTEP
#define CSTEP B2F(Y0, 16, 32)
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
#include "half_amd64.h"

// func f16ToF32AVX512(dst *float32, src *uint16, n int)
#undef CSTEP
#define CSTEP H2F(Z0, 32, 64)
TEXT ·f16ToF32AVX512(SB), NOSPLIT, $0-24
#include "half_amd64.h"

// func f16ToF32F16C(dst *float32, src *uint16, n int)
#undef CSTEP
#define CSTEP H2F(Y0, 16, 32)
TEXT ·f16ToF32F16C(SB), NOSPLIT, $0-24
#include "half_amd64.h"

// func f32ToF16AVX512(dst *uint16, src *float32, n int)
#undef CSTEP
#define CSTEP F2H(Z0, 64, 32)
TEXT ·f32ToF16AVX512(SB), NOSPLIT, $0-24
#include "half_amd64.h"

// func f32ToF16F16C(dst *uint16, src *float32, n int)
#undef CSTEP
#define CSTEP F2H(Y0, 32, 16)
TEXT ·f32ToF16F16C(SB), NOSPLIT, $0-24
#include "half_amd64.h"

// func f32ToBF16AVX512(dst *uint16, src *float32, n int)
//
// f32ToBF16 in sixteen lanes: (b + 0x7fff + (b>>16)&1) >> 16, or for a NaN
// (|b| > +Inf, unsigned) (b>>16) | 0x40, narrowed with VPMOVDW.
#undef CSETUP
#define CSETUP \
	VPBROADCASTD bf16K<>+0(SB), Z16 \
	VPBROADCASTD bf16K<>+4(SB), Z17 \
	VPBROADCASTD bf16K<>+8(SB), Z18 \
	VPBROADCASTD bf16K<>+12(SB), Z19 \
	VPBROADCASTD bf16K<>+16(SB), Z20

#undef CSTEP
#define CSTEP \
	VMOVDQU32 (SI), Z0 \
	VPSRLD $16, Z0, Z1 \
	VPANDD Z16, Z1, Z2 \
	VPADDD Z17, Z2, Z2 \
	VPADDD Z0, Z2, Z2 \
	VPSRLD $16, Z2, Z2 \
	VPANDD Z18, Z0, Z3 \
	VPCMPUD $6, Z19, Z3, K1 \
	VPORD Z20, Z1, K1, Z2 \
	VPMOVDW Z2, (DI) \
	ADDQ $64, SI \
	ADDQ $32, DI

TEXT ·f32ToBF16AVX512(SB), NOSPLIT, $0-24
#include "half_amd64.h"

// func f32ToBF16AVX2(dst *uint16, src *float32, n int)
//
// f32ToBF16AVX512 in eight lanes, the NaN test a signed compare (|b| has no
// sign bit), narrowed with VPACKUSDW (the values fit in 16 bits: nothing
// saturates).
#undef CSETUP
#define CSETUP \
	VPBROADCASTD bf16K<>+0(SB), Y8 \
	VPBROADCASTD bf16K<>+4(SB), Y9 \
	VPBROADCASTD bf16K<>+8(SB), Y10 \
	VPBROADCASTD bf16K<>+12(SB), Y11 \
	VPBROADCASTD bf16K<>+16(SB), Y12

#undef CSTEP
#define CSTEP \
	VMOVDQU (SI), Y0 \
	VPSRLD $16, Y0, Y1 \
	VPAND Y8, Y1, Y2 \
	VPADDD Y9, Y2, Y2 \
	VPADDD Y0, Y2, Y2 \
	VPSRLD $16, Y2, Y2 \
	VPAND Y10, Y0, Y3 \
	VPCMPGTD Y11, Y3, Y3 \
	VPOR Y12, Y1, Y1 \
	VPBLENDVB Y3, Y1, Y2, Y2 \
	VEXTRACTI128 $1, Y2, X3 \
	VPACKUSDW X3, X2, X2 \
	VMOVDQU X2, (DI) \
	ADDQ $32, SI \
	ADDQ $16, DI

TEXT ·f32ToBF16AVX2(SB), NOSPLIT, $0-24
#include "half_amd64.h"
