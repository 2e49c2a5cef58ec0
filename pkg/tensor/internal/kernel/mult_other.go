//go:build !amd64 || purego

package kernel

// MulTAvailable reports whether MulT has a vector body here: not on this
// platform.
func MulTAvailable() bool { return false }

// mulTVec has no vector body on this platform.
func mulTVec(out []float32, ldo int, x []float32, ldx int, wt []float32, ldw int, m, n, k int, acc bool) bool {
	return false
}
