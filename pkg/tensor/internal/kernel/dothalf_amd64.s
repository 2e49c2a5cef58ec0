//go:build !purego

#include "textflag.h"
#include "zero_amd64.h"

// The few-row products over 16-bit weights of DotRowsBF16 and DotRowsF16
// (see dothalf.go). Every element is sixteen lanes of fused multiply-adds
// over k (k ≡ l mod 16 in lane l, the k%16 tail padded with zeros), then
// s_l = lane l + lane l+8, added as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)),
// then the old output when acc: the same operations in every kernel here,
// whatever the rows or the element's place.

// halfMask is sixteen all-ones lanes then sixteen zero lanes: the 64 bytes
// at offset 4*(16-t) select the first t lanes of sixteen.
DATA halfMask<>+0(SB)/8, $-1
DATA halfMask<>+8(SB)/8, $-1
DATA halfMask<>+16(SB)/8, $-1
DATA halfMask<>+24(SB)/8, $-1
DATA halfMask<>+32(SB)/8, $-1
DATA halfMask<>+40(SB)/8, $-1
DATA halfMask<>+48(SB)/8, $-1
DATA halfMask<>+56(SB)/8, $-1
DATA halfMask<>+64(SB)/8, $0
DATA halfMask<>+72(SB)/8, $0
DATA halfMask<>+80(SB)/8, $0
DATA halfMask<>+88(SB)/8, $0
DATA halfMask<>+96(SB)/8, $0
DATA halfMask<>+104(SB)/8, $0
DATA halfMask<>+112(SB)/8, $0
DATA halfMask<>+120(SB)/8, $0
GLOBL halfMask<>(SB), RODATA|NOPTR, $128

// HARGS loads the arguments both bodies share: the strides in bytes (R12
// weight rows, R8 input rows, R15 output rows), the first weight row R9,
// the output R14, the columns BX and the rows R11.
#define HARGS \
	MOVQ ldw+24(FP), R12 \
	SHLQ $1, R12 \
	MOVQ ldx+8(FP), R8 \
	SHLQ $2, R8 \
	MOVQ w+16(FP), R9 \
	MOVQ out+32(FP), R14 \
	MOVQ ldo+40(FP), R15 \
	SHLQ $2, R15 \
	MOVQ nc+48(FP), BX \
	MOVQ rows+64(FP), R11

// HMASKS sets the AVX-512 bodies' masks: K1 the k%16 tail lanes, K2 all
// lanes when acc, else none.
#define HMASKS \
	MOVQ k+56(FP), CX \
	ANDQ $15, CX \
	MOVL $1, AX \
	SHLL CX, AX \
	DECL AX \
	KMOVW AX, K1 \
	MOVQ acc+72(FP), AX \
	NEGQ AX \
	KMOVW AX, K2

// ---- AVX2: up to three rows by two weight rows (dothalf256_amd64.h) ----

// YZACC clears the accumulators Y4-Y15.
#define YZACC \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	ZEROY8_11 \
	VXORPS Y12, Y12, Y12 \
	VXORPS Y13, Y13, Y13 \
	VXORPS Y14, Y14, Y14 \
	VXORPS Y15, Y15, Y15

// YSTEP widens eight values of each of the two weight rows at off(DX)
// into Y0 and Y1.
#define YSTEP(off) \
	WCVT8(off(DX), Y0) \
	WCVT8(off(DX)(R12*1), Y1)

// YROW loads eight floats of an input row into Y2 and accumulates their
// products with Y0 and Y1 into a0 and a1; YROWM masks the loads with Y3.
#define YROW(src, a0, a1) \
	VMOVUPS src, Y2 \
	VFMADD231PS Y0, Y2, a0 \
	VFMADD231PS Y1, Y2, a1

#define YROWM(src, a0, a1) \
	VMASKMOVPS src, Y3, Y2 \
	VFMADD231PS Y0, Y2, a0 \
	VFMADD231PS Y1, Y2, a1

// YADV fetches the next block's 64 bytes matching this step and moves the
// input rows and weights on by sixteen.
#define YADV \
	PREFETCHT0 (R10) \
	ADDQ $64, R10 \
	ADDQ $64, SI \
	ADDQ $32, DX

// OUTY reduces a row's accumulators for the two weight rows (lanes 0-7 and
// 8-15 of each) into the two sums in the low half of X2, adds the old
// outputs at dst or -0 (see dothalf256_amd64.h) and stores the two at dst.
#define OUTY(a0, b0, a1, b1, dst) \
	VADDPS b0, a0, Y0 \
	VADDPS b1, a1, Y1 \
	VHADDPS Y1, Y0, Y2 \
	VHADDPS Y2, Y2, Y2 \
	VEXTRACTF128 $1, Y2, X3 \
	VADDPS X3, X2, X2 \
	VMOVSD dst, X3 \
	VANDPS 64(SP), X3, X3 \
	VORPS 80(SP), X3, X3 \
	VADDPS X3, X2, X2 \
	VMOVSD X2, dst

// ---- AVX-512: up to six rows by four weight rows (dothalf512_amd64.h) ----

// ROWS1..ROWS6 apply op to input rows 0..n-1: their address, the register
// that receives them, and their four accumulators.
#define ROWS1(op) \
	op((SI), Z4, Z8, Z9, Z10, Z11)

#define ROWS2(op) \
	ROWS1(op) \
	op((SI)(R8*1), Z5, Z12, Z13, Z14, Z15)

#define ROWS3(op) \
	ROWS2(op) \
	op((SI)(R8*2), Z4, Z16, Z17, Z18, Z19)

#define ROWS4(op) \
	ROWS3(op) \
	op((DI), Z5, Z20, Z21, Z22, Z23)

#define ROWS5(op) \
	ROWS4(op) \
	op((DI)(R8*1), Z4, Z24, Z25, Z26, Z27)

#define ROWS6(op) \
	ROWS5(op) \
	op((DI)(R8*2), Z5, Z28, Z29, Z30, Z31)

// ZACC4 clears a row's accumulators.
#define ZACC4(src, xr, a0, a1, a2, a3) \
	VPXORD a0, a0, a0 \
	VPXORD a1, a1, a1 \
	VPXORD a2, a2, a2 \
	VPXORD a3, a3, a3

// XROWZ loads sixteen floats of an input row into xr and accumulates their
// products with the four widened weight rows Z0-Z3; XROWZM the tail, its
// lanes past k zeroed.
#define XROWZ(src, xr, a0, a1, a2, a3) \
	VMOVUPS src, xr \
	VFMADD231PS Z0, xr, a0 \
	VFMADD231PS Z1, xr, a1 \
	VFMADD231PS Z2, xr, a2 \
	VFMADD231PS Z3, xr, a3

#define XROWZM(src, xr, a0, a1, a2, a3) \
	VMOVUPS.Z src, K1, xr \
	VFMADD231PS Z0, xr, a0 \
	VFMADD231PS Z1, xr, a1 \
	VFMADD231PS Z2, xr, a2 \
	VFMADD231PS Z3, xr, a3

// HSTEP fetches the 128 bytes of the next four weight rows that match this
// step's sixteen values of these four, then widens the step's weights.
#define HSTEP \
	PREFETCHT0 (R10) \
	PREFETCHT0 64(R10) \
	ADDQ $128, R10 \
	WCVT4

// HADV moves the input rows on by sixteen floats, the weights by sixteen
// values.
#define HADV \
	ADDQ $64, SI \
	ADDQ $64, DI \
	ADDQ $32, DX

// REDZ reduces a row's four accumulators (Z, and their Y halves) into four
// sums in X4: lanes l and l+8 added into Y0-Y3, then the pairwise order of
// dotRows3AVX2 (VHADDPS needs Y0-Y15).
#define REDZ(a0, a1, a2, a3, y0, y1, y2, y3) \
	VEXTRACTF64X4 $1, a0, Y4 \
	VADDPS Y4, y0, Y0 \
	VEXTRACTF64X4 $1, a1, Y4 \
	VADDPS Y4, y1, Y1 \
	VEXTRACTF64X4 $1, a2, Y4 \
	VADDPS Y4, y2, Y2 \
	VEXTRACTF64X4 $1, a3, Y4 \
	VADDPS Y4, y3, Y3 \
	VHADDPS Y1, Y0, Y4 \
	VHADDPS Y3, Y2, Y5 \
	VHADDPS Y5, Y4, Y4 \
	VEXTRACTF128 $1, Y4, X5 \
	VADDPS X5, X4, X4

// OUTZ reduces a row's four accumulators, adds the old outputs at dst in
// the lanes of K2 and stores the four sums at dst; OUT3 does the same for
// three accumulators (Z7, zero, the fourth) in the lanes of K4 and K3.
#define OUTZ(a0, a1, a2, a3, y0, y1, y2, y3, dst) \
	REDZ(a0, a1, a2, a3, y0, y1, y2, y3) \
	VADDPS dst, X4, K2, X4 \
	VMOVUPS X4, dst

#define OUT3(a0, a1, a2, y0, y1, y2, dst) \
	REDZ(a0, a1, a2, Z7, y0, y1, y2, Y7) \
	VADDPS dst, X4, K4, X4 \
	VMOVUPS X4, K3, dst

// ROWS8 applies op to the eight input rows of the eight-row body: their
// address, the register that receives them, and their three accumulators.
#define ROWS8(op) \
	op((SI), Z4, Z8, Z9, Z10) \
	op((SI)(R8*1), Z5, Z11, Z12, Z13) \
	op((SI)(R8*2), Z4, Z14, Z15, Z16) \
	op((DI), Z5, Z17, Z18, Z19) \
	op((DI)(R8*1), Z4, Z20, Z21, Z22) \
	op((DI)(R8*2), Z5, Z23, Z24, Z25) \
	op((R13), Z4, Z26, Z27, Z28) \
	op((R13)(R8*1), Z5, Z29, Z30, Z31)

// ZACC3 clears a row's three accumulators; XROW3 and XROW3M are XROWZ and
// XROWZM for three weight rows (Z0-Z2).
#define ZACC3(src, xr, a0, a1, a2) \
	VPXORD a0, a0, a0 \
	VPXORD a1, a1, a1 \
	VPXORD a2, a2, a2

#define XROW3(src, xr, a0, a1, a2) \
	VMOVUPS src, xr \
	VFMADD231PS Z0, xr, a0 \
	VFMADD231PS Z1, xr, a1 \
	VFMADD231PS Z2, xr, a2

#define XROW3M(src, xr, a0, a1, a2) \
	VMOVUPS.Z src, K1, xr \
	VFMADD231PS Z0, xr, a0 \
	VFMADD231PS Z1, xr, a1 \
	VFMADD231PS Z2, xr, a2

// WCVT4 widens the step's sixteen values of each of the four weight rows at
// DX into Z0-Z3 with the format's CVT; WCVT4M the tail lanes of K1 (CVTM),
// the others zero; WCVT3 and WCVT3M the same for three weight rows (Z0-Z2).
// WCVT8 widens eight values at src into the Y register dst.
#define WCVT3 \
	CVT((DX), Z0) \
	CVT((DX)(R12*1), Z1) \
	CVT((DX)(R12*2), Z2)

#define WCVT4 \
	WCVT3 \
	CVT((DX)(R13*1), Z3)

#define WCVT3M \
	CVTM((DX), Z0) \
	CVTM((DX)(R12*1), Z1) \
	CVTM((DX)(R12*2), Z2)

#define WCVT4M \
	WCVT3M \
	CVTM((DX)(R13*1), Z3)

#define WCVT8(src, dst) CVT(src, dst)

// ---- The bodies, for bfloat16 weights, then binary16 ----

// CVT widens the bfloat16 values at src (as many as the register dst has
// lanes) into dst: zero-extended, then shifted into the upper half; CVTM
// the lanes of K1, the others zero.
#define CVT(src, dst) \
	VPMOVZXWD src, dst \
	VPSLLD $16, dst, dst

#define CVTM(src, dst) \
	VPMOVZXWD.Z src, K1, dst \
	VPSLLD $16, dst, dst

// func dotBF16x4AVX512(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)
TEXT ·dotBF16x4AVX512(SB), NOSPLIT, $0-80
#include "dothalf512_amd64.h"

// func dotBF16x8r3AVX512(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)
TEXT ·dotBF16x8r3AVX512(SB), NOSPLIT, $0-80
#include "dothalf8_amd64.h"

// func dotBF16x2AVX2(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)
TEXT ·dotBF16x2AVX2(SB), NOSPLIT, $96-80
#include "dothalf256_amd64.h"

#undef CVT
#undef CVTM

// CVT and CVTM for binary16 values: VCVTPH2PS (F16C for Y registers).
#define CVT(src, dst) \
	VCVTPH2PS src, dst

#define CVTM(src, dst) \
	VCVTPH2PS.Z src, K1, dst

// func dotF16x4AVX512(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)
TEXT ·dotF16x4AVX512(SB), NOSPLIT, $0-80
#include "dothalf512_amd64.h"

// func dotF16x8r3AVX512(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)
TEXT ·dotF16x8r3AVX512(SB), NOSPLIT, $0-80
#include "dothalf8_amd64.h"

// func dotF16x2AVX2(x *float32, ldx int, w *uint16, ldw int, out *float32, ldo, nc, k, rows, acc int)
TEXT ·dotF16x2AVX2(SB), NOSPLIT, $96-80
#include "dothalf256_amd64.h"
