package kernel

import (
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// BenchmarkMicro measures a micro-kernel alone on a tile whose operands stay
// in the L1 cache: the ceiling for Sgemm (GFLOP per second of CPU time).
func BenchmarkMicro(b *testing.B) {
	for _, kind := range []int{kindAVX2, kindAVX512} {
		if !kindSupported(kind) {
			continue
		}
		b.Run(map[int]string{kindAVX2: "avx2", kindAVX512: "avx512"}[kind], func(b *testing.B) {
			mr, nr := tileShape(kind)
			const k = 256
			a := grow(new([]float32), mr*k)
			bb := grow(new([]float32), nr*k)
			c := make([]float32, mr*64)
			c0 := testutil.ProcessCPU()
			for b.Loop() {
				for i := 0; i < 100; i++ {
					microKernel(kind, k, &a[0], &bb[0], &c[0], 64, 1, 1, 1)
				}
			}
			flops := 2 * float64(mr*nr*k*100) * float64(b.N)
			b.ReportMetric(flops/(testutil.ProcessCPU()-c0)/1e9, "GFLOP/cpu-s")
		})
	}
}

// BenchmarkMicroBF16 is BenchmarkMicro for GemmBF16's micro-kernel: 256 k
// pairs (512 bfloat16 products a lane) per call.
func BenchmarkMicroBF16(b *testing.B) {
	if !HasGemmBF16() {
		b.Skip("no AVX512_BF16 here")
	}
	const kp = 256
	a := grow(new([]uint32), dotMR*kp)
	bb := grow(new([]uint32), dotNR*kp)
	c := make([]float32, dotMR*64)
	c0 := testutil.ProcessCPU()
	for b.Loop() {
		for i := 0; i < 100; i++ {
			dotKernel(kp, &a[0], &bb[0], &c[0], 64, 1)
		}
	}
	flops := 2 * float64(dotMR*dotNR*2*kp*100) * float64(b.N)
	b.ReportMetric(flops/(testutil.ProcessCPU()-c0)/1e9, "GFLOP/cpu-s")
}
