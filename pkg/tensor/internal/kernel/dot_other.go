//go:build !amd64 || purego

package kernel

// dotRowsVec has no vector body on this platform: dotRows computes every
// column in Go.
func dotRowsVec(out []float32, ldo int, x []float32, ldx int, w []float32, ldw int, m, n, k int, acc bool) int {
	return 0
}

// wsumVec has no vector body on this platform.
func wsumVec(out, p, v []float32, ldv, n, k int, acc bool) int { return 0 }
