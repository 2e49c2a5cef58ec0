// The body of dotBF16x4AVX512 and dotF16x4AVX512 (see dothalf_amd64.s),
// included after their TEXT lines with the format's CVT and CVTM defined: up to six
// rows x, x+ldx, ..., times nc (a positive multiple of 4) weight rows of
// 16-bit values w[j*ldw : j*ldw+k], four weight rows at a time, into
// out[i*ldo + j] (added to the old value when acc is not 0).
//
// Registers: the four weight rows' widened sixteen values in Z0-Z3, an input
// row's in Z4 or Z5, row i's four accumulators in Z(8+4i)..Z(11+4i), the
// k%16 tail lanes in K1. SI and DI address input rows 0 and 3, R8 is the
// input row stride in bytes, DX walks the four weight rows (R12 and R13:
// one and three weight rows in bytes), R9 is the block's first weight row,
// R10 prefetches the next block, R14 and R15 the output block and stride,
// BX counts the columns left, R11 holds rows; K2 selects the output lanes
// that add the old outputs (all when acc, else none).

	HARGS
	LEAQ (R12)(R12*2), R13  // three weight rows
	HMASKS

hcol:
	MOVQ x+0(FP), SI
	LEAQ (SI)(R8*2), DI
	ADDQ R8, DI             // input row 3
	MOVQ R9, DX
	LEAQ (R9)(R12*4), R10   // the next four weight rows, fetched as these are read
	MOVQ k+56(FP), CX
	SHRQ $4, CX
	CMPQ R11, $3
	JLT  hlt3
	JEQ  hr3
	CMPQ R11, $5
	JLT  hr4
	JEQ  hr5
	ROWS6(ZACC4)
	TESTQ CX, CX
	JZ   ht6

hk6:
	HSTEP
	ROWS6(XROWZ)
	HADV
	DECQ CX
	JNZ  hk6

ht6:
	KORTESTW K1, K1
	JZ   hreduce
	WCVT4M
	ROWS6(XROWZM)
	JMP  hreduce

hr5:
	ROWS5(ZACC4)
	TESTQ CX, CX
	JZ   ht5

hk5:
	HSTEP
	ROWS5(XROWZ)
	HADV
	DECQ CX
	JNZ  hk5

ht5:
	KORTESTW K1, K1
	JZ   hreduce
	WCVT4M
	ROWS5(XROWZM)
	JMP  hreduce

hr4:
	ROWS4(ZACC4)
	TESTQ CX, CX
	JZ   ht4

hk4:
	HSTEP
	ROWS4(XROWZ)
	HADV
	DECQ CX
	JNZ  hk4

ht4:
	KORTESTW K1, K1
	JZ   hreduce
	WCVT4M
	ROWS4(XROWZM)
	JMP  hreduce

hr3:
	ROWS3(ZACC4)
	TESTQ CX, CX
	JZ   ht3

hk3:
	HSTEP
	ROWS3(XROWZ)
	HADV
	DECQ CX
	JNZ  hk3

ht3:
	KORTESTW K1, K1
	JZ   hreduce
	WCVT4M
	ROWS3(XROWZM)
	JMP  hreduce

hlt3:
	CMPQ R11, $2
	JEQ  hr2
	ROWS1(ZACC4)
	TESTQ CX, CX
	JZ   ht1

hk1:
	HSTEP
	ROWS1(XROWZ)
	HADV
	DECQ CX
	JNZ  hk1

ht1:
	KORTESTW K1, K1
	JZ   hreduce
	WCVT4M
	ROWS1(XROWZM)
	JMP  hreduce

hr2:
	ROWS2(ZACC4)
	TESTQ CX, CX
	JZ   ht2

hk2:
	HSTEP
	ROWS2(XROWZ)
	HADV
	DECQ CX
	JNZ  hk2

ht2:
	KORTESTW K1, K1
	JZ   hreduce
	WCVT4M
	ROWS2(XROWZM)

hreduce:
	LEAQ (R14)(R15*2), AX
	ADDQ R15, AX            // output row 3
	OUTZ(Z8, Z9, Z10, Z11, Y8, Y9, Y10, Y11, (R14))
	CMPQ R11, $2
	JLT  hnext
	OUTZ(Z12, Z13, Z14, Z15, Y12, Y13, Y14, Y15, (R14)(R15*1))
	CMPQ R11, $3
	JLT  hnext
	OUTZ(Z16, Z17, Z18, Z19, Y16, Y17, Y18, Y19, (R14)(R15*2))
	CMPQ R11, $4
	JLT  hnext
	OUTZ(Z20, Z21, Z22, Z23, Y20, Y21, Y22, Y23, (AX))
	CMPQ R11, $5
	JLT  hnext
	OUTZ(Z24, Z25, Z26, Z27, Y24, Y25, Y26, Y27, (AX)(R15*1))
	CMPQ R11, $6
	JLT  hnext
	OUTZ(Z28, Z29, Z30, Z31, Y28, Y29, Y30, Y31, (AX)(R15*2))

hnext:
	ADDQ $16, R14
	LEAQ (R9)(R12*4), R9
	SUBQ $4, BX
	JNZ  hcol
	VZEROUPPER
	RET
