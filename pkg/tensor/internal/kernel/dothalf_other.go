//go:build !amd64 || purego

package kernel

// dotRowsHalfVec has no vector body on this platform: dotRowsHalf computes
// in Go.
func dotRowsHalfVec(h Half, out []float32, ldo int, x []float32, ldx int, w []uint16, ldw int, m, n, k int, acc bool) bool {
	return false
}

// dotRowsHalfAsm reports whether DotRowsBF16 (f16: DotRowsF16) runs in
// assembly here: never.
func dotRowsHalfAsm(h Half) bool { return false }
