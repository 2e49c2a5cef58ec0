//go:build !purego

#include "textflag.h"

// Bulk conversions between float32 and the 16-bit formats (see half.go),
// over n values, n a positive multiple of the vector width (sixteen with
// AVX-512, eight with AVX2/F16C).

// func bf16ToF32AVX512(dst *float32, src *uint16, n int)
TEXT ·bf16ToF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX

b2f512:
	VPMOVZXWD (SI), Z0
	VPSLLD $16, Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  b2f512
	VZEROUPPER
	RET

// func bf16ToF32AVX2(dst *float32, src *uint16, n int)
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX

b2f256:
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  b2f256
	VZEROUPPER
	RET

// func f16ToF32AVX512(dst *float32, src *uint16, n int)
TEXT ·f16ToF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX

h2f512:
	VCVTPH2PS (SI), Z0
	VMOVUPS Z0, (DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  h2f512
	VZEROUPPER
	RET

// func f16ToF32F16C(dst *float32, src *uint16, n int)
TEXT ·f16ToF32F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX

h2f256:
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  h2f256
	VZEROUPPER
	RET

// func f32ToF16AVX512(dst *uint16, src *float32, n int)
//
// VCVTPS2PH with immediate 0 rounds to nearest even whatever MXCSR says.
TEXT ·f32ToF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX

f2h512:
	VMOVUPS (SI), Z0
	VCVTPS2PH $0, Z0, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  f2h512
	VZEROUPPER
	RET

// func f32ToF16F16C(dst *uint16, src *float32, n int)
TEXT ·f32ToF16F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX

f2h256:
	VMOVUPS (SI), Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	DECQ CX
	JNZ  f2h256
	VZEROUPPER
	RET

// The constants of f32ToBF16's rounding: 1, 0x7fff, the magnitude mask,
// +Inf and the quiet bit of a bfloat16 NaN.
DATA bf16K<>+0(SB)/4, $1
DATA bf16K<>+4(SB)/4, $0x7fff
DATA bf16K<>+8(SB)/4, $0x7fffffff
DATA bf16K<>+12(SB)/4, $0x7f800000
DATA bf16K<>+16(SB)/4, $0x40
GLOBL bf16K<>(SB), RODATA|NOPTR, $20

// func f32ToBF16AVX512(dst *uint16, src *float32, n int)
//
// f32ToBF16 in sixteen lanes: (b + 0x7fff + (b>>16)&1) >> 16, or for a NaN
// (b>>16) | 0x40, narrowed with VPMOVDW.
TEXT ·f32ToBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	VPBROADCASTD bf16K<>+0(SB), Z16
	VPBROADCASTD bf16K<>+4(SB), Z17
	VPBROADCASTD bf16K<>+8(SB), Z18
	VPBROADCASTD bf16K<>+12(SB), Z19
	VPBROADCASTD bf16K<>+16(SB), Z20

f2b512:
	VMOVDQU32 (SI), Z0
	VPSRLD $16, Z0, Z1
	VPANDD Z16, Z1, Z2
	VPADDD Z17, Z2, Z2
	VPADDD Z0, Z2, Z2
	VPSRLD $16, Z2, Z2
	VPANDD Z18, Z0, Z3
	VPCMPUD $6, Z19, Z3, K1 // |b| > +Inf: a NaN
	VPORD Z20, Z1, K1, Z2
	VPMOVDW Z2, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  f2b512
	VZEROUPPER
	RET

// func f32ToBF16AVX2(dst *uint16, src *float32, n int)
//
// f32ToBF16AVX512 in eight lanes, narrowed with VPACKUSDW (the values fit
// in 16 bits, so nothing saturates).
TEXT ·f32ToBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	VPBROADCASTD bf16K<>+0(SB), Y8
	VPBROADCASTD bf16K<>+4(SB), Y9
	VPBROADCASTD bf16K<>+8(SB), Y10
	VPBROADCASTD bf16K<>+12(SB), Y11
	VPBROADCASTD bf16K<>+16(SB), Y12

f2b256:
	VMOVDQU (SI), Y0
	VPSRLD $16, Y0, Y1
	VPAND Y8, Y1, Y2
	VPADDD Y9, Y2, Y2
	VPADDD Y0, Y2, Y2
	VPSRLD $16, Y2, Y2
	VPAND Y10, Y0, Y3
	VPCMPGTD Y11, Y3, Y3 // |b| > +Inf (as signed: |b| has no sign bit): a NaN
	VPOR Y12, Y1, Y1
	VPBLENDVB Y3, Y1, Y2, Y2
	VEXTRACTI128 $1, Y2, X3
	VPACKUSDW X3, X2, X2
	VMOVDQU X2, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	DECQ CX
	JNZ  f2b256
	VZEROUPPER
	RET
