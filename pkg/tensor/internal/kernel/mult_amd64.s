//go:build !purego

#include "textflag.h"
#include "zero_amd64.h"

// The transposed-weight products of MulT (see mult.go). Each output element
// is one chain of fused multiply-adds over p = 0..k-1 starting from zero,
// then, when acc is not 0, the old output added once: the same operations
// in every kernel, so a row's result does not depend on how many rows are
// computed with it or on which column block holds the element.

// FMA4 multiplies the four weight vectors Z16-Z19 by the broadcast b into
// the accumulators a0-a3.
#define FMA4(b, a0, a1, a2, a3) \
	VFMADD231PS Z16, b, a0 \
	VFMADD231PS Z17, b, a1 \
	VFMADD231PS Z18, b, a2 \
	VFMADD231PS Z19, b, a3

// ACC4 adds the 64 outputs at ptr to a0-a3 (the acc case).
#define ACC4(ptr, a0, a1, a2, a3) \
	VADDPS (ptr), a0, a0 \
	VADDPS 64(ptr), a1, a1 \
	VADDPS 128(ptr), a2, a2 \
	VADDPS 192(ptr), a3, a3

// STORE4 writes a0-a3 to the 64 outputs at ptr.
#define STORE4(ptr, a0, a1, a2, a3) \
	VMOVUPS a0, (ptr) \
	VMOVUPS a1, 64(ptr) \
	VMOVUPS a2, 128(ptr) \
	VMOVUPS a3, 192(ptr)

// func mulT1x128AVX512(x, wt *float32, ldw int, out *float32, k, acc int)
//
// One row x[0:k] times the 128 columns wt[p*ldw : p*ldw+128], p < k, into
// out[0:128]: eight accumulators, one broadcast per p.
TEXT ·mulT1x128AVX512(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ wt+8(FP), DI
	MOVQ ldw+16(FP), R8
	SHLQ $2, R8
	MOVQ out+24(FP), DX
	MOVQ k+32(FP), CX
	ZERO8

loop1:
	VBROADCASTSS (SI), Z8
	VFMADD231PS (DI), Z8, Z0
	VFMADD231PS 64(DI), Z8, Z1
	VFMADD231PS 128(DI), Z8, Z2
	VFMADD231PS 192(DI), Z8, Z3
	VFMADD231PS 256(DI), Z8, Z4
	VFMADD231PS 320(DI), Z8, Z5
	VFMADD231PS 384(DI), Z8, Z6
	VFMADD231PS 448(DI), Z8, Z7
	ADDQ $4, SI
	ADDQ R8, DI
	DECQ CX
	JNZ loop1

	LEAQ 256(DX), R9
	MOVQ acc+40(FP), AX
	TESTQ AX, AX
	JZ store1
	ACC4(DX, Z0, Z1, Z2, Z3)
	ACC4(R9, Z4, Z5, Z6, Z7)

store1:
	STORE4(DX, Z0, Z1, Z2, Z3)
	STORE4(R9, Z4, Z5, Z6, Z7)
	VZEROUPPER
	RET

// func mulT4x64AVX512(x *float32, ldx int, wt *float32, ldw int, out *float32, ldo, k, acc int)
//
// Four rows x[i*ldx : i*ldx+k], i < 4, times the 64 columns
// wt[p*ldw : p*ldw+64] into out[i*ldo : i*ldo+64]: sixteen accumulators, the
// weights read once for the four rows.
TEXT ·mulT4x64AVX512(SB), NOSPLIT, $0-64
	MOVQ x+0(FP), SI
	MOVQ ldx+8(FP), R9
	SHLQ $2, R9
	LEAQ (SI)(R9*1), R10
	LEAQ (R10)(R9*1), R11
	LEAQ (R11)(R9*1), R12
	MOVQ wt+16(FP), DI
	MOVQ ldw+24(FP), R8
	SHLQ $2, R8
	MOVQ k+48(FP), CX
	ZERO16

loop4:
	VMOVUPS (DI), Z16
	VMOVUPS 64(DI), Z17
	VMOVUPS 128(DI), Z18
	VMOVUPS 192(DI), Z19
	VBROADCASTSS (SI), Z20
	VBROADCASTSS (R10), Z21
	VBROADCASTSS (R11), Z22
	VBROADCASTSS (R12), Z23
	FMA4(Z20, Z0, Z1, Z2, Z3)
	FMA4(Z21, Z4, Z5, Z6, Z7)
	FMA4(Z22, Z8, Z9, Z10, Z11)
	FMA4(Z23, Z12, Z13, Z14, Z15)
	ADDQ $4, SI
	ADDQ $4, R10
	ADDQ $4, R11
	ADDQ $4, R12
	ADDQ R8, DI
	DECQ CX
	JNZ loop4

	MOVQ out+32(FP), DX
	MOVQ ldo+40(FP), R13
	SHLQ $2, R13
	LEAQ (DX)(R13*1), R10
	LEAQ (R10)(R13*1), R11
	LEAQ (R11)(R13*1), R12
	MOVQ acc+56(FP), AX
	TESTQ AX, AX
	JZ store4
	ACC4(DX, Z0, Z1, Z2, Z3)
	ACC4(R10, Z4, Z5, Z6, Z7)
	ACC4(R11, Z8, Z9, Z10, Z11)
	ACC4(R12, Z12, Z13, Z14, Z15)

store4:
	STORE4(DX, Z0, Z1, Z2, Z3)
	STORE4(R10, Z4, Z5, Z6, Z7)
	STORE4(R11, Z8, Z9, Z10, Z11)
	STORE4(R12, Z12, Z13, Z14, Z15)
	VZEROUPPER
	RET

// BFMA2 broadcasts element AX of the row at ptr and multiplies the two weight
// vectors Z16, Z17 by it into a0, a1.
#define BFMA2(ptr, b, a0, a1) \
	VBROADCASTSS (ptr)(AX*4), b \
	VFMADD231PS Z16, b, a0 \
	VFMADD231PS Z17, b, a1

// OUT2 stores a0, a1 to the 32 outputs at the pointer held at off(AX),
// after adding the old outputs when DX is not 0.
#define OUT2(off, a0, a1) \
	MOVQ off(AX), R15 \
	TESTQ DX, DX \
	JZ 3(PC) \
	VADDPS (R15), a0, a0 \
	VADDPS 64(R15), a1, a1 \
	VMOVUPS a0, (R15) \
	VMOVUPS a1, 64(R15)

// func mulT8x32AVX512(xs *[8]*float32, wt *float32, ldw int, outs *[8]*float32, k, acc int)
//
// Eight rows xs[i][0:k] times the 32 columns wt[p*ldw : p*ldw+32] into
// outs[i][0:32]: sixteen accumulators, two weight loads per eight rows, so
// that the weights' traffic from the cache is a quarter of mulT4x64's per
// row and the fused multiply-adds bound the loop.
TEXT ·mulT8x32AVX512(SB), NOSPLIT, $0-48
	MOVQ xs+0(FP), AX
	MOVQ 0(AX), SI
	MOVQ 8(AX), R8
	MOVQ 16(AX), R9
	MOVQ 24(AX), R10
	MOVQ 32(AX), R11
	MOVQ 40(AX), R12
	MOVQ 48(AX), R13
	MOVQ 56(AX), R14
	MOVQ wt+8(FP), DI
	MOVQ ldw+16(FP), BX
	SHLQ $2, BX
	MOVQ k+32(FP), CX
	XORQ AX, AX
	ZERO16

loop8:
	VMOVUPS (DI), Z16
	VMOVUPS 64(DI), Z17
	BFMA2(SI, Z18, Z0, Z1)
	BFMA2(R8, Z19, Z2, Z3)
	BFMA2(R9, Z20, Z4, Z5)
	BFMA2(R10, Z21, Z6, Z7)
	BFMA2(R11, Z22, Z8, Z9)
	BFMA2(R12, Z23, Z10, Z11)
	BFMA2(R13, Z24, Z12, Z13)
	BFMA2(R14, Z25, Z14, Z15)
	ADDQ BX, DI
	INCQ AX
	CMPQ AX, CX
	JLT loop8

	MOVQ outs+24(FP), AX
	MOVQ acc+40(FP), DX
	OUT2(0, Z0, Z1)
	OUT2(8, Z2, Z3)
	OUT2(16, Z4, Z5)
	OUT2(24, Z6, Z7)
	OUT2(32, Z8, Z9)
	OUT2(40, Z10, Z11)
	OUT2(48, Z12, Z13)
	OUT2(56, Z14, Z15)
	VZEROUPPER
	RET

// func mulT1x64AVX512(x, wt *float32, ldw int, out *float32, k, acc int)
//
// mulT1x128AVX512 for 64 columns: four accumulators, for products (or the
// last columns of one) no wider, which would otherwise read 64 columns of
// padding.
TEXT ·mulT1x64AVX512(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ wt+8(FP), DI
	MOVQ ldw+16(FP), R8
	SHLQ $2, R8
	MOVQ out+24(FP), DX
	MOVQ k+32(FP), CX
	ZERO4

loop64:
	VBROADCASTSS (SI), Z8
	VFMADD231PS (DI), Z8, Z0
	VFMADD231PS 64(DI), Z8, Z1
	VFMADD231PS 128(DI), Z8, Z2
	VFMADD231PS 192(DI), Z8, Z3
	ADDQ $4, SI
	ADDQ R8, DI
	DECQ CX
	JNZ loop64

	MOVQ acc+40(FP), AX
	TESTQ AX, AX
	JZ store64
	ACC4(DX, Z0, Z1, Z2, Z3)

store64:
	STORE4(DX, Z0, Z1, Z2, Z3)
	VZEROUPPER
	RET
