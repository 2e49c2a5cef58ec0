package cpu

import "fmt"

// checkGemm panics with a descriptive message when the buffers cannot hold the
// matrices described. A mismatch here is a programming error inside drafter,
// never a user error, so it panics instead of returning an error.
func checkGemm(transA, transB bool, m, n, k, la, lda, lb, ldb, lc, ldc int) {
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if lda < ac || ldb < bc || ldc < n {
		panic(fmt.Sprintf("tensor: sgemm strides lda=%d ldb=%d ldc=%d too small for %dx%d * %dx%d", lda, ldb, ldc, ar, ac, br, bc))
	}
	if (ar > 0 && la < (ar-1)*lda+ac) || (br > 0 && lb < (br-1)*ldb+bc) || lc < (m-1)*ldc+n {
		panic(fmt.Sprintf("tensor: sgemm buffers too short (a %d, b %d, c %d) for m=%d n=%d k=%d", la, lb, lc, m, n, k))
	}
}

func checkGemv(trans bool, m, n, la, lda, lx, ly int) {
	xl, yl := n, m
	if trans {
		xl, yl = m, n
	}
	if lda < n || la < (m-1)*lda+n || lx < xl || ly < yl {
		panic(fmt.Sprintf("tensor: sgemv buffers too short (a %d, x %d, y %d) for m=%d n=%d lda=%d trans=%v", la, lx, ly, m, n, lda, trans))
	}
}
