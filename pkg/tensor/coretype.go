package tensor

import "golang.org/x/sys/cpu"

// OpenBLASCoreType returns the OpenBLAS kernel family (the OPENBLAS_CORETYPE
// value) this processor's features support, "SkylakeX" (AVX-512) or "Haswell"
// (AVX2 and FMA), or "" when neither applies. OpenBLAS detects the processor
// itself, but on virtual machines that hide the CPU model it may fall back to
// its generic kernels (measured 6x slower); a command sets OPENBLAS_CORETYPE
// to this value, when the user has not, before it loads OpenBLAS.
func OpenBLASCoreType() string {
	switch {
	case cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512CD:
		return "SkylakeX"
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return "Haswell"
	}
	return ""
}
