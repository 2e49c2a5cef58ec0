package model

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/devices"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// The benchmarks report tokens/s and, measured in the same run so that the
// machine's load affects both alike, the figures of the model's own matrix
// multiplies called directly on the backend (one call per weight matrix, no
// attention or element-wise work):
//
//	raw-tokens/s   tokens/s if a pass cost only those direct calls
//	sgemm-GFLOP/s  their rate (sgemv for a single row)
//
// and cpu-ms/token, the process CPU time per token (every thread, a BLAS
// library's included), which a loaded machine disturbs less than tokens/s.
//
// tokens/s divided by raw-tokens/s is the share of the matrix-multiply bound
// the whole forward reaches. For scale, llama.cpp (2 threads, float32) on the
// random60M shape measured 3844 tokens/s prefill (512 tokens), 245 tokens/s
// decode of one sequence and 792 tokens/s over eight.

// rawMatmul times the forward's weight products for rows rows, called
// directly on the backend, and returns the best of a few seconds per pass and
// the multiply-adds of one pass. logitRows rows go through the LM head.
func rawMatmul(m *Model, rows, logitRows int) (sec, flops float64) {
	be := m.dev.(*cpu.Device).Backend()
	type mm struct {
		w    tensor.Matrix
		n, k int
	}
	var mms []mm
	for i := range m.Layers {
		l := &m.Layers[i]
		for _, lin := range []*Linear{&l.Attn.Q, &l.Attn.K, &l.Attn.V, &l.Attn.O, &l.MLP.Gate, &l.MLP.Up, &l.MLP.Down} {
			mms = append(mms, mm{lin.W, lin.Out, lin.In})
		}
	}
	maxN := m.vocab
	for _, p := range mms {
		maxN = max(maxN, p.n)
	}
	x := make([]float32, rows*max(m.h, m.inter, m.qDim))
	for i := range x {
		x[i] = float32(i%13) * 0.01
	}
	out := make([]float32, rows*maxN)
	// Float32 weights go through the few-row kernels split over the workers
	// up to tensor.FewRows rows (an unprepared weight's cpu.Products
	// product), else the backend's GEMM; 16-bit ones through their few-row
	// kernel, else their GEMM.
	pr := cpu.NewProducts(be)
	mul := func(w tensor.Matrix, rows int) {
		switch {
		case w.DType == tensor.F32 && rows <= tensor.FewRows:
			wt := tensor.WeightOf(w)
			pr.MulT(out, x, &wt, rows, false)
		case w.DType == tensor.F32:
			be.Sgemm(false, true, rows, w.Rows, w.Cols, 1, x, w.Cols, w.F32, w.Cols, 0, out, w.Rows)
		case rows <= tensor.FewRows:
			cpu.MatrixDotRows(w, out, w.Rows, x, w.Cols, rows, false)
		default:
			cpu.MatrixMulT(w, be, out, w.Rows, x, w.Cols, rows, 0)
		}
	}
	pass := func() {
		for _, p := range mms {
			mul(p.w, rows)
		}
		mul(m.LMHead, logitRows)
	}
	for _, p := range mms {
		flops += 2 * float64(rows*p.n*p.k)
	}
	flops += 2 * float64(logitRows*m.vocab*m.h)
	pass()
	sec = -1
	for r := 0; r < 3; r++ {
		t0 := time.Now()
		pass()
		if d := time.Since(t0).Seconds(); sec < 0 || d < sec {
			sec = d
		}
	}
	return sec, flops
}

// reportRaw adds the direct-call figures for passes of tokens tokens.
func reportRaw(b *testing.B, m *Model, rows, logitRows, tokens int) {
	if _, ok := m.dev.(*cpu.Device); !ok {
		return // the direct calls are the CPU backend's
	}
	b.StopTimer()
	sec, flops := rawMatmul(m, rows, logitRows)
	b.ReportMetric(float64(tokens)/sec, "raw-tokens/s")
	b.ReportMetric(flops/sec/1e9, "sgemm-GFLOP/s")
}

// benchModel is one model the forward benchmarks run, under its row name.
type benchModel struct {
	name string
	m    *Model
}

// benchDevice returns the device the forward benchmarks run on:
// DRAFTER_BENCH_DEVICE (auto, cpu, cuda, cuda:N; scripts/gpu-check.sh sets
// it), the CPU device when unset.
func benchDevice(b *testing.B) tensor.Device {
	v := os.Getenv("DRAFTER_BENCH_DEVICE")
	if v == "" {
		return nil
	}
	spec, err := devices.Parse(v)
	if err != nil {
		b.Fatal(err)
	}
	d, err := devices.Open(spec, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	return d
}

// benchModels returns stories260k and the 60M model, each in float32 and as
// its bf16 and f16 checkpoints hold it, on benchDevice.
func benchModels(b *testing.B) []benchModel {
	var out []benchModel
	dev := benchDevice(b)
	add := func(name string, m *Model, err error) {
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		out = append(out, benchModel{name, m})
	}
	m, err := Load(testutil.Stories260k(), dev)
	add("stories260k", m, err)
	// stories260k as bf16 and f16 safetensors checkpoints, loaded as a user's
	// would be: products over the mapped 16-bit values.
	for _, dt := range []safetensors.DType{safetensors.BF16, safetensors.F16} {
		dir, _ := convertCheckpoint(b, testutil.Stories260k(), dt)
		m, err := Load(dir, dev)
		add("stories260k-"+strings.ToLower(string(dt)), m, err)
	}
	// The 60M model (random60M-bf16, random60M-f16: the same weights
	// rounded, laid out as a checkpoint file holds them).
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		name := "random60M"
		if dt != tensor.F32 {
			name += "-" + dt.String()
		}
		m, err := NewRandomAs(Bench60MConfig(), 1, dt, dev)
		add(name, m, err)
	}
	return out
}

// BenchmarkPrefill measures prefill of a 512-token prompt.
func BenchmarkPrefill(b *testing.B) {
	for _, bm := range benchModels(b) {
		b.Run(bm.name, func(b *testing.B) {
			m := bm.m
			toks := make([]int, 512)
			for i := range toks {
				toks[i] = (i*7919 + 3) % m.VocabSize()
			}
			seq := mustSeq(b, m, 512)
			in := []Input{{Seq: seq, Tokens: toks}}
			b.ResetTimer()
			c0 := testutil.ProcessCPU()
			for i := 0; i < b.N; i++ {
				seq.Reset()
				if _, err := m.Forward(in, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric((testutil.ProcessCPU()-c0)*1e3/float64(512*b.N), "cpu-ms/token")
			reportRaw(b, m, 512, 1, 512)
		})
	}
}

// BenchmarkDecode measures greedy-style decode steps after a 16-token prompt,
// for one sequence and for eight decoded together (aggregate tokens/s).
func BenchmarkDecode(b *testing.B) {
	for _, bm := range benchModels(b) {
		for _, nseq := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/seqs=%d", bm.name, nseq), func(b *testing.B) {
				m := bm.m
				const capacity, prompt = 256, 16
				batch := make([]Input, nseq)
				toks := make([][]int, nseq)
				reset := func() {
					for s := range batch {
						if batch[s].Seq == nil {
							batch[s].Seq = mustSeq(b, m, capacity)
						}
						batch[s].Seq.Reset()
						p := make([]int, prompt)
						for i := range p {
							p[i] = (s*31 + i*17 + 1) % m.VocabSize()
						}
						batch[s].Tokens = p
					}
					if _, err := m.Forward(batch, Options{}); err != nil {
						b.Fatal(err)
					}
					for s := range batch {
						toks[s] = []int{s + 5}
						batch[s].Tokens = toks[s]
					}
				}
				reset()
				b.ResetTimer()
				c0, paused := testutil.ProcessCPU(), 0.0
				for i := 0; i < b.N; i++ {
					if batch[0].Seq.Len() == capacity {
						b.StopTimer()
						p0 := testutil.ProcessCPU()
						reset()
						paused += testutil.ProcessCPU() - p0
						b.StartTimer()
					}
					if _, err := m.Forward(batch, Options{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(nseq*b.N)/b.Elapsed().Seconds(), "tokens/s")
				b.ReportMetric((testutil.ProcessCPU()-c0-paused)*1e3/float64(nseq*b.N), "cpu-ms/token")
				reportRaw(b, m, nseq, nseq, nseq)
			})
		}
	}
}

// BenchmarkTreeVerify measures one speculative verification pass on
// stories260k after a 100-token context: a tree of t nodes (a chain when every
// parent is the previous node) with logits for every node and the final
// hidden state tapped, dropped again with an empty Commit. cpu-us/pass is the
// figure to compare against t=1, a plain decode step.
func BenchmarkTreeVerify(b *testing.B) {
	m := loadModel(b, "stories260k")
	const ctx = 100
	for _, t := range []int{1, 5, 8, 34, 60} {
		b.Run(fmt.Sprintf("nodes=%d", t), func(b *testing.B) {
			seq := mustSeq(b, m, ctx+t+1)
			p := make([]int, ctx)
			for i := range p {
				p[i] = (i*17 + 1) % m.VocabSize()
			}
			if _, err := m.Forward([]Input{{Seq: seq, Tokens: p}}, Options{}); err != nil {
				b.Fatal(err)
			}
			toks := make([]int, t)
			parents := make([]int, t)
			for i := range toks {
				toks[i] = (i*7 + 3) % m.VocabSize()
				parents[i] = (i+1)/3 - 1 // a bushy tree: three children per node
			}
			in := []Input{{Seq: seq, Tokens: toks, Parents: parents, Logits: LogitsAll}}
			opt := Options{Taps: []int{m.NumLayers()}}
			b.ResetTimer()
			c0 := testutil.ProcessCPU()
			for i := 0; i < b.N; i++ {
				if _, err := m.Forward(in, opt); err != nil {
					b.Fatal(err)
				}
				if err := seq.Commit(nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((testutil.ProcessCPU()-c0)*1e6/float64(b.N), "cpu-us/pass")
		})
	}
}
