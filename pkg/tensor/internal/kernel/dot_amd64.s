//go:build !purego

#include "textflag.h"
#include "zero_amd64.h"

// maskTab is eight all-ones lanes then eight zero lanes: the 32 bytes at
// offset 4*(8-t) select the first t lanes of a masked load.
DATA maskTab<>+0(SB)/4, $0xffffffff
DATA maskTab<>+4(SB)/4, $0xffffffff
DATA maskTab<>+8(SB)/4, $0xffffffff
DATA maskTab<>+12(SB)/4, $0xffffffff
DATA maskTab<>+16(SB)/4, $0xffffffff
DATA maskTab<>+20(SB)/4, $0xffffffff
DATA maskTab<>+24(SB)/4, $0xffffffff
DATA maskTab<>+28(SB)/4, $0xffffffff
DATA maskTab<>+32(SB)/4, $0
DATA maskTab<>+36(SB)/4, $0
DATA maskTab<>+40(SB)/4, $0
DATA maskTab<>+44(SB)/4, $0
DATA maskTab<>+48(SB)/4, $0
DATA maskTab<>+52(SB)/4, $0
DATA maskTab<>+56(SB)/4, $0
DATA maskTab<>+60(SB)/4, $0
GLOBL maskTab<>(SB), RODATA|NOPTR, $64

// The six-row kernel (dotRows6AVX512, at the end) keeps the four weight rows
// of a step in Y0-Y3, an input row in Y4 or Y5, the k%8 tail mask in Y6 and
// row i's four accumulators in Y(8+4i)..Y(11+4i), up to Y31.

// WLOAD4 loads eight floats of each of the four weight rows at DX; WLOAD4M
// the masked tail.
#define WLOAD4 \
	VMOVUPS (DX), Y0 \
	VMOVUPS (DX)(R12*1), Y1 \
	VMOVUPS (DX)(R12*2), Y2 \
	VMOVUPS (DX)(R13*1), Y3

#define WLOAD4M \
	VMASKMOVPS (DX), Y6, Y0 \
	VMASKMOVPS (DX)(R12*1), Y6, Y1 \
	VMASKMOVPS (DX)(R12*2), Y6, Y2 \
	VMASKMOVPS (DX)(R13*1), Y6, Y3

// XROW loads eight floats of an input row into xr and accumulates their
// products with the four weight rows; XROWM the masked tail.
#define XROW(src, xr, a0, a1, a2, a3) \
	VMOVUPS src, xr \
	VFMADD231PS Y0, xr, a0 \
	VFMADD231PS Y1, xr, a1 \
	VFMADD231PS Y2, xr, a2 \
	VFMADD231PS Y3, xr, a3

#define XROWM(src, xr, a0, a1, a2, a3) \
	VMASKMOVPS src, Y6, xr \
	VFMADD231PS Y0, xr, a0 \
	VFMADD231PS Y1, xr, a1 \
	VFMADD231PS Y2, xr, a2 \
	VFMADD231PS Y3, xr, a3

// OUTROW reduces a row's four accumulators into X4 (VHADDPS has no EVEX
// form, so they move to Y0-Y3 first).
#define OUTROW(a0, a1, a2, a3) \
	VMOVAPS a0, Y0 \
	VMOVAPS a1, Y1 \
	VMOVAPS a2, Y2 \
	VMOVAPS a3, Y3 \
	REDUCE4T(Y0, Y1, Y2, Y3, Y4, Y5, X4, X5)

// WIDESTEP prefetches the 128 bytes of the next four weight rows that match
// one step of eight floats of these four.
#define WIDESTEP \
	PREFETCHT0 (R10) \
	PREFETCHT0 64(R10) \
	ADDQ $128, R10

// REDUCE4 sums each of the accumulators a0..a3 (8 lanes each) into one lane
// of X12, as ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), the order dotRowsGo uses.
#define REDUCE4(a0, a1, a2, a3) \
	VHADDPS a1, a0, Y12 \
	VHADDPS a3, a2, Y13 \
	VHADDPS Y13, Y12, Y12 \
	VEXTRACTF128 $1, Y12, X13 \
	VADDPS X13, X12, X12

// REDUCE4T is REDUCE4 with the temporaries t0, t1 (X forms xt0, xt1): the
// result is in xt0.
#define REDUCE4T(a0, a1, a2, a3, t0, t1, xt0, xt1) \
	VHADDPS a1, a0, t0 \
	VHADDPS a3, a2, t1 \
	VHADDPS t1, t0, t0 \
	VEXTRACTF128 $1, t0, xt1 \
	VADDPS xt1, xt0, xt0

// func dotRows3AVX2(x0, x1, x2, w, out *float32, ldo, n4, k, rows, acc, ldw int)
//
// For r = rows (1..3) rows x0, x1, x2 of k floats each (a missing row repeats
// x0) and n4 (a positive multiple of 4) weight rows w[j*ldw : j*ldw+k], it sets
// out[i*ldo + j] to the inner product of row i with weight row j, or adds it
// there when acc is not 0. Four weight rows at a time are multiplied by all
// three rows, eight lanes of k at a time with fused multiply-adds, the k%8
// tail through masked loads; each element's order of operations depends only
// on k, never on rows or on where the element sits.
TEXT ·dotRows3AVX2(SB), NOSPLIT, $0-88
	MOVQ ldw+80(FP), R12
	SHLQ $2, R12           // bytes per weight row
	LEAQ (R12)(R12*2), R13 // three rows
	MOVQ w+24(FP), R9      // first weight row of the block
	MOVQ out+32(FP), R14
	MOVQ ldo+40(FP), R15
	SHLQ $2, R15           // bytes per output row
	MOVQ n4+48(FP), BX
	MOVQ k+56(FP), AX
	ANDQ $7, AX
	NEGQ AX
	LEAQ maskTab<>(SB), R11
	LEAQ 32(R11)(AX*4), R11 // mask of the k%8 tail lanes

col:
	MOVQ x0+0(FP), SI
	MOVQ x1+8(FP), DI
	MOVQ x2+16(FP), R8
	MOVQ R9, DX
	LEAQ (R9)(R12*4), R10  // the next four weight rows, prefetched as these are read
	ZEROY12
	MOVQ k+56(FP), CX
	SHRQ $3, CX
	MOVQ rows+64(FP), AX
	CMPQ AX, $2
	JLT one
	JEQ two
	TESTQ CX, CX
	JZ tail

kloop:
	PREFETCHT0 (R10)
	PREFETCHT0 64(R10)
	ADDQ $128, R10
	VMOVUPS (SI), Y12
	VMOVUPS (DI), Y13
	VMOVUPS (R8), Y14
	VMOVUPS (DX), Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y4
	VFMADD231PS Y15, Y14, Y8
	VMOVUPS (DX)(R12*1), Y15
	VFMADD231PS Y15, Y12, Y1
	VFMADD231PS Y15, Y13, Y5
	VFMADD231PS Y15, Y14, Y9
	VMOVUPS (DX)(R12*2), Y15
	VFMADD231PS Y15, Y12, Y2
	VFMADD231PS Y15, Y13, Y6
	VFMADD231PS Y15, Y14, Y10
	VMOVUPS (DX)(R13*1), Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y7
	VFMADD231PS Y15, Y14, Y11
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $32, DX
	DECQ CX
	JNZ kloop

tail:
	MOVQ k+56(FP), AX
	TESTQ $7, AX
	JZ reduce
	VMOVUPS (R11), Y15
	VMASKMOVPS (SI), Y15, Y12
	VMASKMOVPS (DI), Y15, Y13
	VMASKMOVPS (DX), Y15, Y14
	VFMADD231PS Y14, Y12, Y0
	VFMADD231PS Y14, Y13, Y4
	VMASKMOVPS (DX)(R12*1), Y15, Y14
	VFMADD231PS Y14, Y12, Y1
	VFMADD231PS Y14, Y13, Y5
	VMASKMOVPS (DX)(R12*2), Y15, Y14
	VFMADD231PS Y14, Y12, Y2
	VFMADD231PS Y14, Y13, Y6
	VMASKMOVPS (DX)(R13*1), Y15, Y14
	VFMADD231PS Y14, Y12, Y3
	VFMADD231PS Y14, Y13, Y7
	VMASKMOVPS (R8), Y15, Y12
	VMASKMOVPS (DX), Y15, Y14
	VFMADD231PS Y14, Y12, Y8
	VMASKMOVPS (DX)(R12*1), Y15, Y14
	VFMADD231PS Y14, Y12, Y9
	VMASKMOVPS (DX)(R12*2), Y15, Y14
	VFMADD231PS Y14, Y12, Y10
	VMASKMOVPS (DX)(R13*1), Y15, Y14
	VFMADD231PS Y14, Y12, Y11

	JMP reduce

// Two rows: accumulators Y0-Y3 and Y4-Y7.
two:
	TESTQ CX, CX
	JZ tail2

kloop2:
	PREFETCHT0 (R10)
	PREFETCHT0 64(R10)
	ADDQ $128, R10
	VMOVUPS (SI), Y12
	VMOVUPS (DI), Y13
	VMOVUPS (DX), Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y4
	VMOVUPS (DX)(R12*1), Y14
	VFMADD231PS Y14, Y12, Y1
	VFMADD231PS Y14, Y13, Y5
	VMOVUPS (DX)(R12*2), Y15
	VFMADD231PS Y15, Y12, Y2
	VFMADD231PS Y15, Y13, Y6
	VMOVUPS (DX)(R13*1), Y14
	VFMADD231PS Y14, Y12, Y3
	VFMADD231PS Y14, Y13, Y7
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ kloop2

tail2:
	MOVQ k+56(FP), AX
	TESTQ $7, AX
	JZ reduce
	VMOVUPS (R11), Y15
	VMASKMOVPS (SI), Y15, Y12
	VMASKMOVPS (DI), Y15, Y13
	VMASKMOVPS (DX), Y15, Y14
	VFMADD231PS Y14, Y12, Y0
	VFMADD231PS Y14, Y13, Y4
	VMASKMOVPS (DX)(R12*1), Y15, Y14
	VFMADD231PS Y14, Y12, Y1
	VFMADD231PS Y14, Y13, Y5
	VMASKMOVPS (DX)(R12*2), Y15, Y14
	VFMADD231PS Y14, Y12, Y2
	VFMADD231PS Y14, Y13, Y6
	VMASKMOVPS (DX)(R13*1), Y15, Y14
	VFMADD231PS Y14, Y12, Y3
	VFMADD231PS Y14, Y13, Y7
	JMP reduce

// One row: accumulators Y0-Y3.
one:
	TESTQ CX, CX
	JZ tail1

kloop1:
	PREFETCHT0 (R10)
	PREFETCHT0 64(R10)
	ADDQ $128, R10
	VMOVUPS (SI), Y12
	VMOVUPS (DX), Y13
	VFMADD231PS Y13, Y12, Y0
	VMOVUPS (DX)(R12*1), Y14
	VFMADD231PS Y14, Y12, Y1
	VMOVUPS (DX)(R12*2), Y15
	VFMADD231PS Y15, Y12, Y2
	VMOVUPS (DX)(R13*1), Y13
	VFMADD231PS Y13, Y12, Y3
	ADDQ $32, SI
	ADDQ $32, DX
	DECQ CX
	JNZ kloop1

tail1:
	MOVQ k+56(FP), AX
	TESTQ $7, AX
	JZ reduce
	VMOVUPS (R11), Y15
	VMASKMOVPS (SI), Y15, Y12
	VMASKMOVPS (DX), Y15, Y14
	VFMADD231PS Y14, Y12, Y0
	VMASKMOVPS (DX)(R12*1), Y15, Y14
	VFMADD231PS Y14, Y12, Y1
	VMASKMOVPS (DX)(R12*2), Y15, Y14
	VFMADD231PS Y14, Y12, Y2
	VMASKMOVPS (DX)(R13*1), Y15, Y14
	VFMADD231PS Y14, Y12, Y3

reduce:
	MOVQ acc+72(FP), AX
	MOVQ rows+64(FP), CX
	REDUCE4(Y0, Y1, Y2, Y3)
	TESTQ AX, AX
	JZ store0
	VADDPS (R14), X12, X12

store0:
	VMOVUPS X12, (R14)
	CMPQ CX, $2
	JLT next
	REDUCE4(Y4, Y5, Y6, Y7)
	TESTQ AX, AX
	JZ store1
	VADDPS (R14)(R15*1), X12, X12

store1:
	VMOVUPS X12, (R14)(R15*1)
	CMPQ CX, $3
	JLT next
	REDUCE4(Y8, Y9, Y10, Y11)
	TESTQ AX, AX
	JZ store2
	VADDPS (R14)(R15*2), X12, X12

store2:
	VMOVUPS X12, (R14)(R15*2)

next:
	ADDQ $16, R14
	LEAQ (R9)(R12*4), R9
	SUBQ $4, BX
	JNZ col
	VZEROUPPER
	RET

// func wsumAVX2(out, p, v *float32, ldv, n, k8, acc int)
//
// out[d] = sum over j < n of p[j]*v[j*ldv+d] for d < k8 (a positive multiple
// of 8), or that plus out[d] when acc is not 0: eight columns at a time, key j
// accumulated with a fused multiply-add into partial sum j%4, the four sums
// then added as (s0+s1)+(s2+s3). Each element's operations depend only on n
// and the j%4 pattern, so keys with p[j] = 0 past the end change nothing.
TEXT ·wsumAVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DX
	MOVQ v+16(FP), R10
	MOVQ ldv+24(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	MOVQ k8+40(FP), BX

wchunk:
	MOVQ p+8(FP), SI
	MOVQ R10, DI
	ZEROY4
	MOVQ n+32(FP), CX
	CMPQ CX, $4
	JLT wrest

wquad:
	VBROADCASTSS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	VBROADCASTSS 4(SI), Y5
	VFMADD231PS (DI)(R8*1), Y5, Y1
	VBROADCASTSS 8(SI), Y6
	VFMADD231PS (DI)(R8*2), Y6, Y2
	VBROADCASTSS 12(SI), Y7
	VFMADD231PS (DI)(R9*1), Y7, Y3
	ADDQ $16, SI
	LEAQ (DI)(R8*4), DI
	SUBQ $4, CX
	CMPQ CX, $4
	JGE wquad

wrest:
	CMPQ CX, $1
	JLT wsum
	VBROADCASTSS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	CMPQ CX, $2
	JLT wsum
	VBROADCASTSS 4(SI), Y5
	VFMADD231PS (DI)(R8*1), Y5, Y1
	CMPQ CX, $3
	JLT wsum
	VBROADCASTSS 8(SI), Y6
	VFMADD231PS (DI)(R8*2), Y6, Y2

wsum:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	MOVQ acc+48(FP), AX
	TESTQ AX, AX
	JZ wstore
	VADDPS (DX), Y0, Y0

wstore:
	VMOVUPS Y0, (DX)
	ADDQ $32, DX
	ADDQ $32, R10
	SUBQ $8, BX
	JNZ wchunk
	VZEROUPPER
	RET

// func dotRows6AVX512(x *float32, ldx int, w, out *float32, ldo, n4, k, acc, ldw int)
//
// dotRows3AVX2 for six rows x, x+ldx, ..., x+5*ldx at once, in the 32 vector
// registers of AVX-512VL (still eight lanes each): the weights are read once
// per six rows instead of once per three. (Four or five rows gain nothing
// over three plus one or two: the multiply-adds bound them alike.) Every element goes
// through exactly the operations of dotRows3AVX2 (the same fused
// multiply-adds in the same order, the same pairwise reduction), so the
// results are bit for bit the same.
TEXT ·dotRows6AVX512(SB), NOSPLIT, $0-72
	MOVQ ldw+64(FP), R12
	SHLQ $2, R12           // bytes per weight row
	LEAQ (R12)(R12*2), R13 // three rows
	MOVQ ldx+8(FP), R8
	SHLQ $2, R8            // bytes per input row
	MOVQ w+16(FP), R9      // first weight row of the block
	MOVQ out+24(FP), R14
	MOVQ ldo+32(FP), R15
	SHLQ $2, R15           // bytes per output row
	MOVQ n4+40(FP), BX
	MOVQ k+48(FP), AX
	ANDQ $7, AX
	NEGQ AX
	LEAQ maskTab<>(SB), R11
	LEAQ 32(R11)(AX*4), R11 // mask of the k%8 tail lanes

col6:
	MOVQ x+0(FP), SI       // input row 0
	LEAQ (SI)(R8*2), DI
	ADDQ R8, DI            // input row 3
	MOVQ R9, DX
	LEAQ (R9)(R12*4), R10  // the next four weight rows, prefetched as these are read
	MOVQ k+48(FP), CX
	SHRQ $3, CX
	ZEROY8_11
	ZEROY12_31
	TESTQ CX, CX
	JZ tail6

kloop6:
	WIDESTEP
	WLOAD4
	XROW((SI), Y4, Y8, Y9, Y10, Y11)
	XROW((SI)(R8*1), Y5, Y12, Y13, Y14, Y15)
	XROW((SI)(R8*2), Y4, Y16, Y17, Y18, Y19)
	XROW((DI), Y5, Y20, Y21, Y22, Y23)
	XROW((DI)(R8*1), Y4, Y24, Y25, Y26, Y27)
	XROW((DI)(R8*2), Y5, Y28, Y29, Y30, Y31)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ kloop6

tail6:
	MOVQ k+48(FP), AX
	TESTQ $7, AX
	JZ reduce6
	VMOVUPS (R11), Y6
	WLOAD4M
	XROWM((SI), Y4, Y8, Y9, Y10, Y11)
	XROWM((SI)(R8*1), Y5, Y12, Y13, Y14, Y15)
	XROWM((SI)(R8*2), Y4, Y16, Y17, Y18, Y19)
	XROWM((DI), Y5, Y20, Y21, Y22, Y23)
	XROWM((DI)(R8*1), Y4, Y24, Y25, Y26, Y27)
	XROWM((DI)(R8*2), Y5, Y28, Y29, Y30, Y31)

reduce6:
	MOVQ acc+56(FP), CX
	LEAQ (R14)(R15*2), AX
	ADDQ R15, AX // output row 3
	OUTROW(Y8, Y9, Y10, Y11)
	TESTQ CX, CX
	JZ store6_0
	VADDPS (R14), X4, X4

store6_0:
	VMOVUPS X4, (R14)
	OUTROW(Y12, Y13, Y14, Y15)
	TESTQ CX, CX
	JZ store6_1
	VADDPS (R14)(R15*1), X4, X4

store6_1:
	VMOVUPS X4, (R14)(R15*1)
	OUTROW(Y16, Y17, Y18, Y19)
	TESTQ CX, CX
	JZ store6_2
	VADDPS (R14)(R15*2), X4, X4

store6_2:
	VMOVUPS X4, (R14)(R15*2)
	OUTROW(Y20, Y21, Y22, Y23)
	TESTQ CX, CX
	JZ store6_3
	VADDPS (AX), X4, X4

store6_3:
	VMOVUPS X4, (AX)
	OUTROW(Y24, Y25, Y26, Y27)
	TESTQ CX, CX
	JZ store6_4
	VADDPS (AX)(R15*1), X4, X4

store6_4:
	VMOVUPS X4, (AX)(R15*1)
	OUTROW(Y28, Y29, Y30, Y31)
	TESTQ CX, CX
	JZ store6_5
	VADDPS (AX)(R15*2), X4, X4

store6_5:
	VMOVUPS X4, (AX)(R15*2)

	ADDQ $16, R14
	LEAQ (R9)(R12*4), R9
	SUBQ $4, BX
	JNZ col6
	VZEROUPPER
	RET

// WQUADK multiplies four value rows (at DI, DI+R8, DI+2*R8, DI+R9), loaded
// into v0-v3 with the column lanes of K1, by the broadcast weights at
// SI..SI+12 into the partial sums a0-a3 (Z registers for sixteen lanes, Y for
// eight).
#define WQUADK(a0, a1, a2, a3, v0, v1, v2, v3) \
	VMOVUPS.Z (DI), K1, v0 \
	VMOVUPS.Z (DI)(R8*1), K1, v1 \
	VMOVUPS.Z (DI)(R8*2), K1, v2 \
	VMOVUPS.Z (DI)(R9*1), K1, v3 \
	VFMADD231PS.BCST (SI), v0, a0 \
	VFMADD231PS.BCST 4(SI), v1, a1 \
	VFMADD231PS.BCST 8(SI), v2, a2 \
	VFMADD231PS.BCST 12(SI), v3, a3

// WRESTK adds the last CX (0 to 3) value rows into a0-a2 as WQUADK would,
// then goes on at done.
#define WRESTK(done, a0, a1, a2, v0, v1, v2) \
	CMPQ CX, $1 \
	JLT done \
	VMOVUPS.Z (DI), K1, v0 \
	VFMADD231PS.BCST (SI), v0, a0 \
	CMPQ CX, $2 \
	JLT done \
	VMOVUPS.Z (DI)(R8*1), K1, v1 \
	VFMADD231PS.BCST 4(SI), v1, a1 \
	CMPQ CX, $3 \
	JLT done \
	VMOVUPS.Z (DI)(R8*2), K1, v2 \
	VFMADD231PS.BCST 8(SI), v2, a2

// WSUMK adds the partial sums as (a0+a1)+(a2+a3) into a0 and, when R11
// (acc) is not 0, the old outputs at DX (lanes of K1, through v); else
// it goes on at skip.
#define WSUMK(skip, a0, a1, a2, a3, v) \
	VADDPS a1, a0, a0 \
	VADDPS a3, a2, a2 \
	VADDPS a2, a0, a0 \
	TESTQ R11, R11 \
	JZ skip \
	VMOVUPS.Z (DX), K1, v \
	VADDPS v, a0, a0

// func wsumAVX512(out, p, v *float32, ldv, n, k, acc int)
//
// WeightedSum with AVX-512: sixteen columns at a time, the last block
// through the mask K1, so that every column, the last ones included, goes
// through the operations of wsumAVX2's lanes (key j into partial sum j%4 by
// fused multiply-adds, then (s0+s1)+(s2+s3), then the old output added).
TEXT ·wsumAVX512(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DX
	MOVQ v+16(FP), R10
	MOVQ ldv+24(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	MOVQ k+40(FP), BX
	MOVQ acc+48(FP), R11

zchunk:
	// K1 selects min(16, columns left) lanes.
	MOVQ BX, CX
	CMPQ CX, $16
	JLE zmask
	MOVQ $16, CX

zmask:
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	MOVQ p+8(FP), SI
	MOVQ R10, DI
	ZERO4
	MOVQ n+32(FP), CX
	CMPQ CX, $4
	JLT zrest

zquad:
	WQUADK(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7)
	ADDQ $16, SI
	LEAQ (DI)(R8*4), DI
	SUBQ $4, CX
	CMPQ CX, $4
	JGE zquad

zrest:
	WRESTK(zsum, Z0, Z1, Z2, Z4, Z5, Z6)

zsum:
	WSUMK(zstore, Z0, Z1, Z2, Z3, Z4)

zstore:
	VMOVUPS Z0, K1, (DX)
	ADDQ $64, DX
	ADDQ $64, R10
	SUBQ $16, BX
	JG zchunk
	VZEROUPPER
	RET

// func wsum8AVX512(out, p, v *float32, ldv, n, k, acc int)
//
// wsumAVX512 for k <= 8 columns (an attention head's P·V) in eight-lane
// registers: the same operations per column, without the sixteen-lane
// loads that would straddle cache lines for nothing.
TEXT ·wsum8AVX512(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DX
	MOVQ v+16(FP), DI
	MOVQ ldv+24(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	MOVQ acc+48(FP), R11
	MOVQ k+40(FP), CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	MOVQ p+8(FP), SI
	ZEROY4
	MOVQ n+32(FP), CX
	CMPQ CX, $4
	JLT yrest

yquad:
	WQUADK(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	ADDQ $16, SI
	LEAQ (DI)(R8*4), DI
	SUBQ $4, CX
	CMPQ CX, $4
	JGE yquad

yrest:
	WRESTK(ysum, Y0, Y1, Y2, Y4, Y5, Y6)

ysum:
	WSUMK(ystore, Y0, Y1, Y2, Y3, Y4)

ystore:
	VMOVUPS Y0, K1, (DX)
	VZEROUPPER
	RET
