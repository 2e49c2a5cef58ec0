//go:build !amd64 || purego

package model

// maxVec has no vector body on this platform.
func maxVec(x []float32, init float32) (int, float32) { return 0, init }

// scaleVec has no vector body on this platform.
func scaleVec(x []float32, s float32) int { return 0 }

// swigluVec has no vector body on this platform.
func swigluVec(out, gate, up []float32) int { return 0 }
