// The loop of the conversion bodies in half_amd64.s, included after their
// TEXT lines with CSETUP (run once) and CSTEP (one vector of values from SI
// to DI, moving both on) defined: n steps.

	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CSETUP

cloop:
	CSTEP
	DECQ CX
	JNZ  cloop
	VZEROUPPER
	RET
