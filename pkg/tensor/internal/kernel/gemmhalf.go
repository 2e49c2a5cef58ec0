package kernel

// SgemmHalf is Sgemm with B stored as 16-bit floats of format h: C =
// alpha*op(A)*op(B) + beta*C, op(B) k x n, B held [n, ldb] when transB (a
// Hugging Face Linear weight [out, in], the prefill product x·Wᵀ) and [k,
// ldb] otherwise. B is widened to float32, exactly, as its micro-panels are
// packed (once per panel and row block of A, so the cost is spread over all
// of A's rows), and the product then runs the float32 micro-kernels: the
// result is, bit for bit, Sgemm's with B widened beforehand, at the same
// speed for products of a few hundred rows or more, reading half the bytes
// of B.
func (g *Gemm) SgemmHalf(par Runner, workers int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, h Half, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	g.bh, g.bfmt = b, h
	defer func() { g.bh = nil }()
	g.Sgemm(par, workers, transA, transB, m, n, k, alpha, a, lda, nil, ldb, beta, c, ldc)
}

// packBHalf is packB for a 16-bit B: the micro-panels [q0, q1) of the k step
// [pc, pc+kcb) into dst, panel after panel, each kcb groups of nr floats.
func (g *Gemm) packBHalf(dst []float32, q0, q1, pc, kcb int) {
	nr := g.nr
	if g.transB {
		for q := q0; q < q1; q++ {
			packTransposeHalf(g.bfmt, dst[(q-q0)*kcb*nr:], g.bh, g.ldb, q*nr, pc, min(nr, g.n-q*nr), kcb, nr)
		}
		return
	}
	j0 := q0 * nr
	packRowsHalf(g.bfmt, dst, g.bh, g.ldb, pc, j0, kcb, min(q1*nr, g.n)-j0, nr)
}

// widenTo widens the 16-bit values src of format h into dst, vectorised.
func widenTo(h Half, dst []float32, src []uint16) {
	if h == BF16 {
		BF16ToF32(dst, src)
	} else {
		F16ToF32(dst, src)
	}
}

// packRowsHalf is packRows for 16-bit x, widening as it packs.
func packRowsHalf(h Half, dst []float32, x []uint16, ld, r0, c0, kc, cols, w int) {
	np := ceilDiv(cols, w)
	full := cols / w
	dst = dst[:np*kc*w]
	for p := 0; p < kc; p++ {
		src := x[(r0+p)*ld+c0:][:cols]
		for q := 0; q < full; q++ {
			widenTo(h, dst[q*kc*w+p*w:][:w], src[q*w:][:w])
		}
		if full < np {
			d := dst[full*kc*w+p*w:][:w]
			t := src[full*w:]
			widenTo(h, d, t)
			clear(d[len(t):])
		}
	}
}

// packTransposeHalf is packTranspose for 16-bit x, widening as it packs:
// eight rows at a time are widened into a stack buffer (kc is at most
// gemmKC), which packT8 transposes into dst.
func packTransposeHalf(h Half, dst []float32, x []uint16, ld, r0, c0, rows, kc, w int) {
	dst = dst[:kc*w]
	var buf [8 * gemmKC]float32
	for r := 0; r < rows; r += 8 {
		rr := min(8, rows-r)
		for i := 0; i < rr; i++ {
			widenTo(h, buf[i*kc:][:kc], x[(r0+r+i)*ld+c0:][:kc])
		}
		p0 := 0
		if rr == 8 && packT8(dst[r:], buf[:], kc, 0, 0, 8, kc, w) == 8 {
			p0 = kc &^ 7
		}
		for i := 0; i < rr; i++ {
			s := buf[i*kc:][:kc]
			for p := p0; p < kc; p++ {
				dst[p*w+r+i] = s[p]
			}
		}
	}
	if rows < w {
		for p := 0; p < kc; p++ {
			clear(dst[p*w+rows : p*w+w])
		}
	}
}
