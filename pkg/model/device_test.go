package model

import (
	"math"
	"testing"

	"github.com/drafter-ai/drafter/internal/testdevice"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// onDevice moves m onto dev: its RoPE tables, weights, scratch and (new)
// sequences.
func onDevice(t *testing.T, m *Model, dev tensor.Device) {
	t.Helper()
	m.dev = dev
	if err := m.rotaries(); err != nil {
		t.Fatal(err)
	}
	if err := m.prepare(); err != nil {
		t.Fatal(err)
	}
	m.s, m.p = scratch{}, pass{}
}

// TestForwardThroughTheDevice runs the same passes (prefill with taps,
// batched decode, a tree, its commit, logits from hidden states) on the CPU
// device and on a device that hides its memory from the host: the model
// must reach every value through the device's interface, and get the same
// bits.
func TestForwardThroughTheDevice(t *testing.T) {
	cfg := Bench60MConfig()
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumLayers, cfg.VocabSize = 96, 256, 2, 300
	cfg.NumHeads, cfg.NumKVHeads, cfg.HeadDim = 4, 2, 24
	cfg.ModelType = "qwen2" // with biases
	runAll := func(m *Model) [][]float32 {
		var outs [][]float32
		keep := func(v []float32) { outs = append(outs, append([]float32(nil), v...)) }
		a, b := mustSeq(t, m, 128), mustSeq(t, m, 128)
		prompt := make([]int, 70)
		for i := range prompt {
			prompt[i] = (i*31 + 2) % cfg.VocabSize
		}
		res, err := m.Forward([]Input{{Seq: a, Tokens: prompt, Logits: LogitsAll}, {Seq: b, Tokens: prompt[:9]}}, Options{Taps: []int{0, 1, 2, PreNormLast}})
		if err != nil {
			t.Fatal(err)
		}
		keep(res.Logits)
		for _, h := range res.Hidden {
			keep(h)
		}
		for step := 0; step < 3; step++ {
			res, err = m.Forward([]Input{{Seq: a, Tokens: []int{step}}, {Seq: b, Tokens: []int{step + 1}}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			keep(res.Logits)
		}
		res, err = m.Forward([]Input{{Seq: a, Tokens: []int{5, 6, 7, 8}, Parents: []int{-1, 0, 0, 2}}}, Options{Taps: []int{2}})
		if err != nil {
			t.Fatal(err)
		}
		keep(res.Logits)
		keep(res.Hidden[0])
		if err := a.Commit([]int{0, 2}); err != nil {
			t.Fatal(err)
		}
		res, err = m.Forward([]Input{{Seq: a, Tokens: []int{9}}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		keep(res.Logits)
		lg := make([]float32, 2*cfg.VocabSize)
		if err := m.LogitsFromHidden(lg, outs[4][:2*cfg.HiddenSize], 2); err != nil {
			t.Fatal(err)
		}
		keep(lg)
		return outs
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		ref, err := NewRandomAs(cfg, 3, dt, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := runAll(ref)
		m, err := NewRandomAs(cfg, 3, dt, nil)
		if err != nil {
			t.Fatal(err)
		}
		onDevice(t, m, testdevice.Copying{Device: m.Device().Sibling().(*cpu.Device)})
		got := runAll(m)
		for i := range want {
			if len(got[i]) != len(want[i]) {
				t.Fatalf("%s output %d: %d values, want %d", dt, i, len(got[i]), len(want[i]))
			}
			for j := range want[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("%s output %d value %d: %v through the copying device, %v on the CPU device", dt, i, j, got[i][j], want[i][j])
				}
			}
		}
	}
}
