// The body of dotBF16x2AVX2 and dotF16x2AVX2 (see dothalf_amd64.s),
// included after their TEXT lines with the format's CVT defined: up to three rows x,
// x+ldx, x+2*ldx, times nc (a positive multiple of 2) weight rows of 16-bit
// values w[j*ldw : j*ldw+k], two weight rows at a time, into out[i*ldo + j]
// (added to the old value when acc is not 0). The sixteen lanes of an
// element's partial sums are two eight-lane registers (lanes 0-7, 8-15), so
// that every element goes through the operations of the AVX-512 body.
//
// Registers: the two weight rows' widened eight values in Y0 and Y1, an
// input row's in Y2, row i's accumulators in Y(4+4i) (weight row 0, lanes
// 0-7), Y(5+4i) (lanes 8-15), Y(6+4i) and Y(7+4i) (weight row 1). SI
// addresses input row 0 and R8 is the input row stride in bytes, DX walks
// weight row 0 (R12: one weight row in bytes), R9 is the block's first
// weight row, R10 prefetches the next block, R14 and R15 the output block
// and stride, BX counts the columns left, R11 holds rows. The k%16 tail goes
// through the frame's first 64 bytes: both weight rows' last values,
// zero-padded to sixteen.

	HARGS
	// The old outputs are added as old&mask | ^mask&-0: either the old
	// outputs or -0, which leaves any sum as it is (the frame's 64(SP) and
	// 80(SP)).
	MOVQ acc+72(FP), AX
	NEGQ AX
	MOVQ AX, X0
	VPBROADCASTD X0, X0
	VMOVDQU X0, 64(SP)
	MOVL $0x80000000, AX
	MOVQ AX, X1
	VPBROADCASTD X1, X1
	VPANDN X1, X0, X1
	VMOVDQU X1, 80(SP)

ycol:
	MOVQ x+0(FP), SI
	MOVQ R9, DX
	LEAQ (R9)(R12*2), R10   // the next two weight rows, fetched as these are read
	MOVQ k+56(FP), CX
	SHRQ $4, CX
	CMPQ R11, $2
	JLT  yr1
	JEQ  yr2
	YZACC
	TESTQ CX, CX
	JZ   yt

yk3:
	YSTEP(0)
	YROW((SI), Y4, Y6)
	YROW((SI)(R8*1), Y8, Y10)
	YROW((SI)(R8*2), Y12, Y14)
	YSTEP(16)
	YROW(32(SI), Y5, Y7)
	YROW(32(SI)(R8*1), Y9, Y11)
	YROW(32(SI)(R8*2), Y13, Y15)
	YADV
	DECQ CX
	JNZ  yk3
	JMP  yt

yr2:
	YZACC
	TESTQ CX, CX
	JZ   yt

yk2:
	YSTEP(0)
	YROW((SI), Y4, Y6)
	YROW((SI)(R8*1), Y8, Y10)
	YSTEP(16)
	YROW(32(SI), Y5, Y7)
	YROW(32(SI)(R8*1), Y9, Y11)
	YADV
	DECQ CX
	JNZ  yk2
	JMP  yt

yr1:
	YZACC
	TESTQ CX, CX
	JZ   yt

yk1:
	YSTEP(0)
	YROW((SI), Y4, Y6)
	YSTEP(16)
	YROW(32(SI), Y5, Y7)
	YADV
	DECQ CX
	JNZ  yk1

yt:
	// The k%16 tail: copy the two weight rows' last t values into the
	// zeroed frame, then run one step of sixteen from there, the input
	// rows' lanes past t masked to zero.
	MOVQ k+56(FP), R10
	ANDQ $15, R10
	JZ   yreduce
	VPXOR Y0, Y0, Y0
	VMOVDQU Y0, 0(SP)
	VMOVDQU Y0, 32(SP)
	LEAQ 0(SP), DI
	LEAQ (DX)(R12*1), R13
	XORQ AX, AX

ycopy:
	MOVWLZX (DX)(AX*2), CX
	MOVW CX, (DI)(AX*2)
	MOVWLZX (R13)(AX*2), CX
	MOVW CX, 32(DI)(AX*2)
	INCQ AX
	CMPQ AX, R10
	JLT  ycopy
	NEGQ R10
	LEAQ halfMask<>(SB), R13
	LEAQ 64(R13)(R10*4), R13 // the masks of lanes 0-7 and 8-15 of the tail
	VMOVDQU (R13), Y3
	WCVT8((DI), Y0)
	WCVT8(32(DI), Y1)
	YROWM((SI), Y4, Y6)
	CMPQ R11, $2
	JLT  ytl1
	YROWM((SI)(R8*1), Y8, Y10)
	CMPQ R11, $3
	JLT  ytl1
	YROWM((SI)(R8*2), Y12, Y14)

ytl1:
	VMOVDQU 32(R13), Y3
	WCVT8(16(DI), Y0)
	WCVT8(48(DI), Y1)
	YROWM(32(SI), Y5, Y7)
	CMPQ R11, $2
	JLT  yreduce
	YROWM(32(SI)(R8*1), Y9, Y11)
	CMPQ R11, $3
	JLT  yreduce
	YROWM(32(SI)(R8*2), Y13, Y15)

yreduce:
	OUTY(Y4, Y5, Y6, Y7, (R14))
	CMPQ R11, $2
	JLT  ynext
	OUTY(Y8, Y9, Y10, Y11, (R14)(R15*1))
	CMPQ R11, $3
	JLT  ynext
	OUTY(Y12, Y13, Y14, Y15, (R14)(R15*2))

ynext:
	ADDQ $8, R14
	LEAQ (R9)(R12*2), R9
	SUBQ $2, BX
	JNZ  ycol
	VZEROUPPER
	RET
