package cpu

import xcpu "golang.org/x/sys/cpu"

// OpenBLASCoreType returns the OpenBLAS kernel family (the OPENBLAS_CORETYPE
// value) this processor's features support, "SkylakeX" (AVX-512) or "Haswell"
// (AVX2 and FMA), or "" when neither applies. OpenBLAS detects the processor
// itself, but on virtual machines that hide the CPU model it may fall back to
// its generic kernels (measured 6x slower); a command sets OPENBLAS_CORETYPE
// to this value, when the user has not, before it loads OpenBLAS.
func OpenBLASCoreType() string {
	switch {
	case xcpu.X86.HasAVX512F && xcpu.X86.HasAVX512BW && xcpu.X86.HasAVX512DQ && xcpu.X86.HasAVX512VL && xcpu.X86.HasAVX512CD:
		return "SkylakeX"
	case xcpu.X86.HasAVX2 && xcpu.X86.HasFMA:
		return "Haswell"
	}
	return ""
}
