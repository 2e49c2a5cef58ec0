// The body of dotBF16x8r3AVX512 and dotF16x8r3AVX512 (see dothalf_amd64.s),
// included after their TEXT lines with the format's CVT and CVTM defined: eight rows
// x, x+ldx, ..., x+7*ldx times nc (a positive multiple of 3) weight rows of
// 16-bit values w[j*ldw : j*ldw+k], three weight rows at a time, into
// out[i*ldo + j] (added to the old value when acc is not 0). Eight rows
// share each widened weight vector where the six-row body's tile shares it
// among six: a sixth fewer instructions per multiply-add.
//
// Registers: the three weight rows' widened sixteen values in Z0-Z2, an
// input row's in Z4 or Z5, zero in Z7 (the missing fourth column of a
// reduction), row i's three accumulators in Z(8+3i)..Z(10+3i), the k%16
// tail lanes in K1, the output lanes that add the old outputs in K4 (three
// when acc, else none) and the three output lanes in K3. SI, DI and R13
// address input rows 0, 3 and 6, R8 is the input row stride in bytes, DX
// walks the three weight rows (R12: one weight row in bytes), R9 is the
// block's first weight row, R10 prefetches the next block, R14 and R15 the
// output block and stride, BX counts the columns left.

	HARGS
	HMASKS
	MOVL $7, AX
	KMOVW AX, K3
	KANDW K2, K3, K4
	VPXORD Z7, Z7, Z7

h8col:
	MOVQ x+0(FP), SI
	LEAQ (SI)(R8*2), DI
	ADDQ R8, DI             // input row 3
	LEAQ (DI)(R8*2), R13
	ADDQ R8, R13            // input row 6
	MOVQ R9, DX
	LEAQ (R9)(R12*2), R10
	ADDQ R12, R10           // the next three weight rows, fetched as these are read
	MOVQ k+56(FP), CX
	SHRQ $4, CX
	ROWS8(ZACC3)
	TESTQ CX, CX
	JZ   h8t

h8k:
	PREFETCHT0 (R10)
	PREFETCHT0 64(R10)
	ADDQ $96, R10
	WCVT3
	ROWS8(XROW3)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, R13
	ADDQ $32, DX
	DECQ CX
	JNZ  h8k

h8t:
	KORTESTW K1, K1
	JZ   h8r
	WCVT3M
	ROWS8(XROW3M)

h8r:
	LEAQ (R14)(R15*2), AX
	ADDQ R15, AX            // output row 3
	LEAQ (AX)(R15*2), DI
	ADDQ R15, DI            // output row 6
	OUT3(Z8, Z9, Z10, Y8, Y9, Y10, (R14))
	OUT3(Z11, Z12, Z13, Y11, Y12, Y13, (R14)(R15*1))
	OUT3(Z14, Z15, Z16, Y14, Y15, Y16, (R14)(R15*2))
	OUT3(Z17, Z18, Z19, Y17, Y18, Y19, (AX))
	OUT3(Z20, Z21, Z22, Y20, Y21, Y22, (AX)(R15*1))
	OUT3(Z23, Z24, Z25, Y23, Y24, Y25, (AX)(R15*2))
	OUT3(Z26, Z27, Z28, Y26, Y27, Y28, (DI))
	OUT3(Z29, Z30, Z31, Y29, Y30, Y31, (DI)(R15*1))
	ADDQ $12, R14
	LEAQ (R9)(R12*2), R9
	ADDQ R12, R9
	SUBQ $3, BX
	JNZ  h8col
	VZEROUPPER
	RET
