package testmodel

import (
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/pkg/model"
)

// Greedy returns prompt followed by up to n tokens of m's greedy decoding,
// ending early after a token of stop.
func Greedy(tb testing.TB, m *model.Model, prompt []int, n int, stop ...int) []int {
	tb.Helper()
	seq, err := m.NewSequence(len(prompt) + n + 1)
	if err != nil {
		tb.Fatal(err)
	}
	out := append([]int(nil), prompt...)
	in := []model.Input{{Seq: seq, Tokens: prompt, Logits: model.LogitsLast}}
	for range n {
		res, err := m.Forward(in, model.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		lg := res.LogitsOf(0)
		best := 0
		for i, v := range lg {
			if v > lg[best] {
				best = i
			}
		}
		out = append(out, best)
		if slices.Contains(stop, best) {
			break
		}
		in[0].Tokens = out[len(out)-1:]
	}
	return out
}

// States runs m teacher-forced over tokens and returns, for each of taps
// (model.Options.Taps numbering), the hidden states at every position:
// len(tokens) rows of m.HiddenSize() values.
func States(tb testing.TB, m *model.Model, tokens, taps []int) [][]float32 {
	tb.Helper()
	seq, err := m.NewSequence(len(tokens))
	if err != nil {
		tb.Fatal(err)
	}
	res, err := m.Forward([]model.Input{{Seq: seq, Tokens: tokens, Logits: model.LogitsNone}}, model.Options{Taps: taps})
	if err != nil {
		tb.Fatal(err)
	}
	out := make([][]float32, len(taps))
	for i := range taps {
		out[i] = append([]float32(nil), res.HiddenOf(i, 0)...)
	}
	return out
}
