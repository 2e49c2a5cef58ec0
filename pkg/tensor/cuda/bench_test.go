package cuda

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The benchmarks measure the two figures a GPU's speed table starts from
// (scripts/gpu-check.sh): the host-device copy bandwidth, from pageable (Go)
// and pinned memory, and cuBLAS's bf16 GEMM rate as MulT runs it (the
// activations rounded to bf16, then cublasGemmEx with fp32 compute). On the
// stand-in they measure the simulator, not a GPU.

// BenchmarkCopy copies 64 MiB to and from the device.
func BenchmarkCopy(b *testing.B) {
	d := openTest(b)
	const bytes = 64 << 20
	dst, err := d.Alloc(tensor.F32, 1, bytes/4)
	if err != nil {
		b.Fatal(err)
	}
	pageable := make([]float32, bytes/4)
	pinned := d.hostScratch(bytes)
	for _, c := range []struct {
		name string
		host unsafe.Pointer
		up   bool
	}{
		{"h2d-pageable", unsafe.Pointer(&pageable[0]), true},
		{"h2d-pinned", pinned, true},
		{"d2h-pageable", unsafe.Pointer(&pageable[0]), false},
		{"d2h-pinned", pinned, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(bytes)
			for i := 0; i < b.N; i++ {
				if c.up {
					d.toDevice(tensor.DeviceAddr(dst), c.host, bytes)
				} else {
					d.toHost(c.host, tensor.DeviceAddr(dst), bytes)
				}
			}
			d.Sync()
			b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// BenchmarkGemmBF16 multiplies m rows by a bf16 weight of n x k through MulT.
func BenchmarkGemmBF16(b *testing.B) {
	d := openTest(b)
	for _, s := range []struct{ m, n, k int }{{512, 4096, 4096}, {4096, 4096, 4096}, {4096, 14336, 4096}} {
		b.Run(fmt.Sprintf("%dx%dx%d", s.m, s.n, s.k), func(b *testing.B) {
			v := make([]float32, s.n*s.k)
			for i := range v {
				v[i] = float32(i%61-30) / 256
			}
			w := tensor.Matrix{DType: tensor.BF16, Rows: s.n, Cols: s.k, U16: make([]uint16, s.n*s.k)}
			tensor.F32ToBF16(w.U16, v)
			wt := tensor.WeightOf(w)
			d.PrepareWeights(&wt)
			x, err := d.Alloc(tensor.F32, s.m, s.k)
			if err != nil {
				b.Fatal(err)
			}
			out, err := d.Alloc(tensor.F32, s.m, s.n)
			if err != nil {
				b.Fatal(err)
			}
			tm, err := d.NewTimer()
			if err != nil {
				b.Fatal(err)
			}
			defer tm.Close()
			d.MulT(out, x, &wt, false)
			d.Sync()
			b.ResetTimer()
			tm.Start()
			for i := 0; i < b.N; i++ {
				d.MulT(out, x, &wt, false)
			}
			el := tm.Stop() // the device's time: launches return before the work is done
			b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/el.Seconds()/1e12, "TFLOP/s")
		})
	}
}
