//go:build !amd64 || purego

package kernel

// expShiftVec has no vector body on this platform.
func expShiftVec(x []float32, shift float32) (int, float32) { return 0, 0 }

// maxVec has no vector body on this platform.
func maxVec(x []float32, init float32) (int, float32) { return 0, init }

// scaleVec has no vector body on this platform.
func scaleVec(x []float32, s float32) int { return 0 }

// swigluVec has no vector body on this platform.
func swigluVec(out, gate, up []float32) int { return 0 }
