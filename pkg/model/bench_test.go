package model

import (
	"fmt"
	"testing"
)

func benchModels(b *testing.B) []struct {
	name string
	m    *Model
} {
	out := []struct {
		name string
		m    *Model
	}{{"stories260k", loadModel(b, "stories260k")}}
	m, err := NewRandom(Bench60MConfig(), 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return append(out, struct {
		name string
		m    *Model
	}{"random60M", m})
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
			for i := 0; i < b.N; i++ {
				seq.Reset()
				if _, err := m.Forward(in, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "tokens/s")
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
				for i := 0; i < b.N; i++ {
					if batch[0].Seq.Len() == capacity {
						b.StopTimer()
						reset()
						b.StartTimer()
					}
					if _, err := m.Forward(batch, Options{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(nseq*b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}
