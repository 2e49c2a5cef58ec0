//go:build !purego

#include "textflag.h"

// The element-wise kernels: softmax's exponentials, maximum and scaling, and
// SwiGLU, eight float32 lanes at a time with AVX2.

// Constants of the exponential (expShiftAVX2, swigluAVX2), each broadcast to
// 8 float32 (or int32) lanes.
#define VEC8(name, bits) \
	DATA name<>+0(SB)/4, $bits; DATA name<>+4(SB)/4, $bits; \
	DATA name<>+8(SB)/4, $bits; DATA name<>+12(SB)/4, $bits; \
	DATA name<>+16(SB)/4, $bits; DATA name<>+20(SB)/4, $bits; \
	DATA name<>+24(SB)/4, $bits; DATA name<>+28(SB)/4, $bits; \
	GLOBL name<>(SB), RODATA|NOPTR, $32

VEC8(expLo, 0xc2aeac4f)    // -87.33654
VEC8(expLog2e, 0x3fb8aa3b) // 1.44269504088896341
VEC8(expHalf, 0x3f000000)  // 0.5
VEC8(expLn2Hi, 0x3f318000) // 0.693359375
VEC8(expLn2Lo, 0xb95e8083) // -2.12194440e-4
VEC8(expP0, 0x39506967)    // 1.9875691500e-4
VEC8(expP1, 0x3ab743ce)    // 1.3981999507e-3
VEC8(expP2, 0x3c088908)    // 8.3334519073e-3
VEC8(expP3, 0x3d2aa9c1)    // 4.1665795894e-2
VEC8(expP4, 0x3e2aaaaa)    // 1.6666665459e-1
VEC8(expP5, 0x3f000000)    // 5.0000001201e-1
VEC8(expOne, 0x3f800000)   // 1
VEC8(expBias, 0x0000007f)  // 127

// EXP8 computes Y5 = e^Y0 in eight lanes from Y1 = Y0*log2e rounded by
// ±0.5 (truncated to ki): k = ki, r = Y0 - k*ln2 in two parts, a degree-5
// polynomial p with e^r = 1 + r + p*r*r, scaled by 2^ki through the exponent
// bits. It clobbers Y1, Y2 and Y4; the caller handles arguments outside
// (-87.33654, 88.3].
#define EXP8 \
	VCVTTPS2DQ Y1, Y1 \
	VCVTDQ2PS Y1, Y2 \
	VMULPS expLn2Hi<>(SB), Y2, Y4 \
	VSUBPS Y4, Y0, Y4 \
	VMULPS expLn2Lo<>(SB), Y2, Y5 \
	VSUBPS Y5, Y4, Y4 \
	VMOVUPS expP0<>(SB), Y5 \
	VMULPS Y4, Y5, Y5 \
	VADDPS expP1<>(SB), Y5, Y5 \
	VMULPS Y4, Y5, Y5 \
	VADDPS expP2<>(SB), Y5, Y5 \
	VMULPS Y4, Y5, Y5 \
	VADDPS expP3<>(SB), Y5, Y5 \
	VMULPS Y4, Y5, Y5 \
	VADDPS expP4<>(SB), Y5, Y5 \
	VMULPS Y4, Y5, Y5 \
	VADDPS expP5<>(SB), Y5, Y5 \
	VMULPS Y4, Y5, Y5 \
	VMULPS Y4, Y5, Y5 \
	VADDPS Y4, Y5, Y5 \
	VADDPS expOne<>(SB), Y5, Y5 \
	VPADDD expBias<>(SB), Y1, Y1 \
	VPSLLD $23, Y1, Y1 \
	VMULPS Y1, Y5, Y5

// func expShiftAVX2(x *float32, n int, shift float32, sums *[8]float32)
// n is a positive multiple of 8. The lanes' partial sums are added to sums.
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ sums+24(FP), DI
	VBROADCASTSS shift+16(FP), Y15
	VMOVUPS (DI), Y6

loop:
	VMOVUPS (SI), Y0
	VSUBPS Y15, Y0, Y0                 // v = x - shift
	VCMPPS $0x1e, expLo<>(SB), Y0, Y3 // keep = v > -87.33654 (false for NaN)
	VMULPS expLog2e<>(SB), Y0, Y1
	VSUBPS expHalf<>(SB), Y1, Y1       // t = v*log2e - 0.5
	EXP8                               // y = e^v
	VANDPS Y3, Y5, Y5                  // 0 where v <= -87.33654
	VMOVUPS Y5, (SI)
	VADDPS Y5, Y6, Y6
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ loop

	VMOVUPS Y6, (DI)
	VZEROUPPER
	RET

// HMAX8 leaves in X6's first lane the largest of Y6's eight lanes; it
// clobbers X1.
#define HMAX8 \
	VEXTRACTF128 $1, Y6, X1 \
	VMAXPS X1, X6, X6 \
	VPERMILPS $0x4e, X6, X1 \
	VMAXPS X1, X6, X6 \
	VPERMILPS $0xb1, X6, X1 \
	VMAXPS X1, X6, X6

// func maxAVX2(x *float32, n int, init float32) float32
// n is a positive multiple of 8. NaN elements are skipped, as in softmaxRow.
TEXT ·maxAVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS init+16(FP), Y6

maxloop:
	VMOVUPS (SI), Y0
	VMAXPS Y6, Y0, Y6 // x > acc ? x : acc (acc for NaN x)
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ maxloop

	HMAX8
	VMOVSS X6, ret+24(FP)
	VZEROUPPER
	RET

// func scaleAVX2(x *float32, n int, s float32)
// x[i] *= s for i < n, a positive multiple of 8.
TEXT ·scaleAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y6

scaleloop:
	VMULPS (SI), Y6, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ scaleloop

	VZEROUPPER
	RET

VEC8(sgHi, 0x42b0999a)   // 88.3: above it expf's scaling needs two steps
VEC8(sgSign, 0x80000000) // sign bit

// func swigluAVX2(out, gate, up *float32, n int) int
// out[i] = gate[i] / (1 + expf(-gate[i])) * up[i], eight at a time with
// swiglu's operations in its order, for i < n (a positive multiple of 8). It
// stops before the first block of eight holding a -gate outside
// (-87.33654, 88.3] (or NaN), whose edge cases the scalar loop handles, and
// returns how many elements it wrote.
TEXT ·swigluAVX2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

sgloop:
	VMOVUPS (SI)(AX*4), Y7              // g
	VXORPS sgSign<>(SB), Y7, Y0         // x = -g
	VCMPPS $0x1e, expLo<>(SB), Y0, Y3   // x > -87.33654
	VCMPPS $0x1d, sgHi<>(SB), Y0, Y8    // x >= 88.3 (NLT_UQ: also NaN)
	VANDNPS Y3, Y8, Y3                  // ordinary lanes
	VMOVMSKPS Y3, BX
	CMPL BX, $0xff
	JNE sgdone
	VMULPS expLog2e<>(SB), Y0, Y1       // t = x*log2e
	VANDPS sgSign<>(SB), Y1, Y2
	VORPS expHalf<>(SB), Y2, Y2         // ±0.5 with t's sign
	VADDPS Y2, Y1, Y1
	EXP8                                // e = expf(x)
	VADDPS expOne<>(SB), Y5, Y5         // 1 + e
	VDIVPS Y5, Y7, Y7                   // g / (1 + e)
	VMULPS (DX)(AX*4), Y7, Y7           // * up
	VMOVUPS Y7, (DI)(AX*4)
	ADDQ $8, AX
	CMPQ AX, CX
	JLT sgloop

sgdone:
	MOVQ AX, ret+32(FP)
	VZEROUPPER
	RET

// EXP16 is EXP8 in sixteen lanes with AVX-512 (Z registers, the constants
// broadcast from their first lane): Z5 = e^Z0 from Z1 = Z0*log2e - 0.5;
// it clobbers Z1, Z2 and Z4.
#define EXP16 \
	VCVTTPS2DQ Z1, Z1 \
	VCVTDQ2PS Z1, Z2 \
	VMULPS.BCST expLn2Hi<>(SB), Z2, Z4 \
	VSUBPS Z4, Z0, Z4 \
	VMULPS.BCST expLn2Lo<>(SB), Z2, Z5 \
	VSUBPS Z5, Z4, Z4 \
	VBROADCASTSS expP0<>(SB), Z5 \
	VMULPS Z4, Z5, Z5 \
	VADDPS.BCST expP1<>(SB), Z5, Z5 \
	VMULPS Z4, Z5, Z5 \
	VADDPS.BCST expP2<>(SB), Z5, Z5 \
	VMULPS Z4, Z5, Z5 \
	VADDPS.BCST expP3<>(SB), Z5, Z5 \
	VMULPS Z4, Z5, Z5 \
	VADDPS.BCST expP4<>(SB), Z5, Z5 \
	VMULPS Z4, Z5, Z5 \
	VADDPS.BCST expP5<>(SB), Z5, Z5 \
	VMULPS Z4, Z5, Z5 \
	VMULPS Z4, Z5, Z5 \
	VADDPS Z4, Z5, Z5 \
	VADDPS.BCST expOne<>(SB), Z5, Z5 \
	VPADDD.BCST expBias<>(SB), Z1, Z1 \
	VPSLLD $23, Z1, Z1 \
	VMULPS Z1, Z5, Z5

// func expShiftAVX512(x *float32, n int, shift float32, sums *[16]float32)
// expShiftAVX2 in sixteen lanes for any n >= 1: the last block through the
// mask K1, its other lanes neither stored nor summed.
TEXT ·expShiftAVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), BX
	MOVQ sums+24(FP), DI
	VBROADCASTSS shift+16(FP), Z15
	VMOVUPS (DI), Z6
	VBROADCASTSS expLo<>(SB), Z14
	VBROADCASTSS expLog2e<>(SB), Z13
	VBROADCASTSS expHalf<>(SB), Z12

eloop:
	MOVQ BX, CX
	CMPQ CX, $16
	JLE emask
	MOVQ $16, CX

emask:
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS Z15, Z0, Z0          // v = x - shift
	VCMPPS $0x1e, Z14, Z0, K2   // keep = v > -87.33654 (false for NaN)
	KANDW K1, K2, K2
	VMULPS Z13, Z0, Z1
	VSUBPS Z12, Z1, Z1          // t = v*log2e - 0.5
	EXP16                       // y = e^v
	VMOVAPS.Z Z5, K2, Z5        // 0 where dropped or past the end
	VMOVUPS Z5, K1, (SI)
	VADDPS Z5, Z6, Z6
	ADDQ $64, SI
	SUBQ $16, BX
	JG eloop

	VMOVUPS Z6, (DI)
	VZEROUPPER
	RET

// func maxAVX512(x *float32, n int, init float32) float32
// maxAVX2 in sixteen lanes for any n >= 1, the last block masked.
TEXT ·maxAVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), BX
	VBROADCASTSS init+16(FP), Z6

mloop:
	MOVQ BX, CX
	CMPQ CX, $16
	JLE mmask
	MOVQ $16, CX

mmask:
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z0
	VMAXPS Z6, Z0, K1, Z6 // x > acc ? x : acc (acc for NaN x and past the end)
	ADDQ $64, SI
	SUBQ $16, BX
	JG mloop

	VEXTRACTF64X4 $1, Z6, Y1
	VMAXPS Y1, Y6, Y6
	HMAX8
	VMOVSS X6, ret+24(FP)
	VZEROUPPER
	RET
