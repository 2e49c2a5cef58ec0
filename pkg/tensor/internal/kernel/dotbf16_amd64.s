//go:build !purego

#include "textflag.h"
#include "zero_amd64.h"

// The bfloat16 dot-product micro-kernel. Go's assembler (go1.26) does not
// know the AVX512_BF16 instructions, so VDPBF16PS is written out as bytes:
// EVEX.512.F3.0F38.W0 52 /r with an embedded broadcast of a 32-bit memory
// operand (EVEX.b = 1, so the 8-bit displacement counts in 4-byte units).
// Each sequence is checked against GNU as 2.40's encoding of the
// instruction in the comment above it.

// PFROWD fetches the C row at AX (two cache lines) and moves AX to the next.
#define PFROWD \
	PREFETCHT0 (AX) \
	PREFETCHT0 64(AX) \
	ADDQ R8, AX

// STOREDL adds a0:a1 to the C row at DX and moves DX to the next row.
#define STOREDL(a0, a1) \
	VADDPS (DX), a0, a0 \
	VADDPS 64(DX), a1, a1 \
	VMOVUPS a0, (DX) \
	VMOVUPS a1, 64(DX) \
	ADDQ R8, DX

// STORED stores a0:a1 into the C row at DX, without reading it.
#define STORED(a0, a1) \
	VMOVUPS a0, (DX) \
	VMOVUPS a1, 64(DX) \
	ADDQ R8, DX

// func dotBF16x14x32(kp int, a, b *uint32, c *float32, ldc int, load int)
//
// dotBF16x14x32 computes the 14 x 32 tile C = A·B, or C += A·B when load is
// 1, from a packed A panel (kp groups of 14 bfloat16 pairs, one 32-bit word
// per row) and a packed, 64-byte-aligned B panel (kp groups of 32 pairs, one
// per column). Each VDPBF16PS adds, in every float32 lane, the two products
// of a row's pair (broadcast) and a column's pair to the accumulator.
TEXT ·dotBF16x14x32(SB), NOSPLIT, $0-48
	MOVQ kp+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	// Fetch the C tile (14 rows of two cache lines) while the loop runs.
	MOVQ DX, AX
	PFROWD
	PFROWD
	PFROWD
	PFROWD
	PFROWD
	PFROWD
	PFROWD
	PFROWD
	PFROWD
	PFROWD
	PFROWD
	PFROWD
	PFROWD
	PFROWD
	ZERO28
	TESTQ CX, CX
	JZ stored
loopd:
	VMOVUPS (DI), Z28
	VMOVUPS 64(DI), Z29
	// VDPBF16PS.BCST 0(SI), Z28, Z0
	BYTE $0x62; BYTE $0xf2; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x06
	// VDPBF16PS.BCST 0(SI), Z29, Z1
	BYTE $0x62; BYTE $0xf2; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x0e
	// VDPBF16PS.BCST 4(SI), Z28, Z2
	BYTE $0x62; BYTE $0xf2; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x56; BYTE $0x01
	// VDPBF16PS.BCST 4(SI), Z29, Z3
	BYTE $0x62; BYTE $0xf2; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x5e; BYTE $0x01
	// VDPBF16PS.BCST 8(SI), Z28, Z4
	BYTE $0x62; BYTE $0xf2; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x66; BYTE $0x02
	// VDPBF16PS.BCST 8(SI), Z29, Z5
	BYTE $0x62; BYTE $0xf2; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x6e; BYTE $0x02
	// VDPBF16PS.BCST 12(SI), Z28, Z6
	BYTE $0x62; BYTE $0xf2; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x76; BYTE $0x03
	// VDPBF16PS.BCST 12(SI), Z29, Z7
	BYTE $0x62; BYTE $0xf2; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x7e; BYTE $0x03
	// VDPBF16PS.BCST 16(SI), Z28, Z8
	BYTE $0x62; BYTE $0x72; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x46; BYTE $0x04
	// VDPBF16PS.BCST 16(SI), Z29, Z9
	BYTE $0x62; BYTE $0x72; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x4e; BYTE $0x04
	// VDPBF16PS.BCST 20(SI), Z28, Z10
	BYTE $0x62; BYTE $0x72; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x56; BYTE $0x05
	// VDPBF16PS.BCST 20(SI), Z29, Z11
	BYTE $0x62; BYTE $0x72; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x5e; BYTE $0x05
	// VDPBF16PS.BCST 24(SI), Z28, Z12
	BYTE $0x62; BYTE $0x72; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x66; BYTE $0x06
	// VDPBF16PS.BCST 24(SI), Z29, Z13
	BYTE $0x62; BYTE $0x72; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x6e; BYTE $0x06
	// VDPBF16PS.BCST 28(SI), Z28, Z14
	BYTE $0x62; BYTE $0x72; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x76; BYTE $0x07
	// VDPBF16PS.BCST 28(SI), Z29, Z15
	BYTE $0x62; BYTE $0x72; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x7e; BYTE $0x07
	// VDPBF16PS.BCST 32(SI), Z28, Z16
	BYTE $0x62; BYTE $0xe2; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x46; BYTE $0x08
	// VDPBF16PS.BCST 32(SI), Z29, Z17
	BYTE $0x62; BYTE $0xe2; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x4e; BYTE $0x08
	// VDPBF16PS.BCST 36(SI), Z28, Z18
	BYTE $0x62; BYTE $0xe2; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x56; BYTE $0x09
	// VDPBF16PS.BCST 36(SI), Z29, Z19
	BYTE $0x62; BYTE $0xe2; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x5e; BYTE $0x09
	// VDPBF16PS.BCST 40(SI), Z28, Z20
	BYTE $0x62; BYTE $0xe2; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x66; BYTE $0x0a
	// VDPBF16PS.BCST 40(SI), Z29, Z21
	BYTE $0x62; BYTE $0xe2; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x6e; BYTE $0x0a
	// VDPBF16PS.BCST 44(SI), Z28, Z22
	BYTE $0x62; BYTE $0xe2; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x76; BYTE $0x0b
	// VDPBF16PS.BCST 44(SI), Z29, Z23
	BYTE $0x62; BYTE $0xe2; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x7e; BYTE $0x0b
	// VDPBF16PS.BCST 48(SI), Z28, Z24
	BYTE $0x62; BYTE $0x62; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x46; BYTE $0x0c
	// VDPBF16PS.BCST 48(SI), Z29, Z25
	BYTE $0x62; BYTE $0x62; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x4e; BYTE $0x0c
	// VDPBF16PS.BCST 52(SI), Z28, Z26
	BYTE $0x62; BYTE $0x62; BYTE $0x1e; BYTE $0x50; BYTE $0x52; BYTE $0x56; BYTE $0x0d
	// VDPBF16PS.BCST 52(SI), Z29, Z27
	BYTE $0x62; BYTE $0x62; BYTE $0x16; BYTE $0x50; BYTE $0x52; BYTE $0x5e; BYTE $0x0d
	ADDQ $56, SI
	ADDQ $128, DI
	DECQ CX
	JNZ loopd
stored:
	MOVQ load+40(FP), AX
	TESTQ AX, AX
	JZ noloadd
	STOREDL(Z0, Z1)
	STOREDL(Z2, Z3)
	STOREDL(Z4, Z5)
	STOREDL(Z6, Z7)
	STOREDL(Z8, Z9)
	STOREDL(Z10, Z11)
	STOREDL(Z12, Z13)
	STOREDL(Z14, Z15)
	STOREDL(Z16, Z17)
	STOREDL(Z18, Z19)
	STOREDL(Z20, Z21)
	STOREDL(Z22, Z23)
	STOREDL(Z24, Z25)
	STOREDL(Z26, Z27)
	VZEROUPPER
	RET
noloadd:
	STORED(Z0, Z1)
	STORED(Z2, Z3)
	STORED(Z4, Z5)
	STORED(Z6, Z7)
	STORED(Z8, Z9)
	STORED(Z10, Z11)
	STORED(Z12, Z13)
	STORED(Z14, Z15)
	STORED(Z16, Z17)
	STORED(Z18, Z19)
	STORED(Z20, Z21)
	STORED(Z22, Z23)
	STORED(Z24, Z25)
	STORED(Z26, Z27)
	VZEROUPPER
	RET
