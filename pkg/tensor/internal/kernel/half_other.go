//go:build !amd64 || purego

package kernel

// The conversions have no vector bodies on this platform: half.go converts
// one value at a time.

func bf16ToF32Vec(dst []float32, src []uint16) int { return 0 }

func f16ToF32Vec(dst []float32, src []uint16) int { return 0 }

func f32ToBF16Vec(dst []uint16, src []float32) int { return 0 }

func f32ToF16Vec(dst []uint16, src []float32) int { return 0 }
