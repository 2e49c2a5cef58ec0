package model

import (
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
)

// TestBadInputErrors checks that every kind of bad input is a clear error that
// leaves the sequence unchanged.
func TestBadInputErrors(t *testing.T) {
	m := loadModel(t, "stories260k")
	other := loadModel(t, "stories260k-untied")
	seq := mustSeq(t, m, 16)
	run(t, m, []Input{{Seq: seq, Tokens: []int{1, 2, 3}}}, Options{})
	pend := mustSeq(t, m, 16)
	run(t, m, []Input{{Seq: pend, Tokens: []int{1, 2}, Parents: []int{-1, 0}}}, Options{})
	cases := []struct {
		name  string
		batch []Input
		opt   Options
		want  string
	}{
		{"empty batch", nil, Options{}, "empty batch"},
		{"empty prompt", []Input{{Seq: seq}}, Options{}, "no tokens"},
		{"token too large", []Input{{Seq: seq, Tokens: []int{4, 512}}}, Options{}, "outside the vocabulary"},
		{"negative token", []Input{{Seq: seq, Tokens: []int{-1}}}, Options{}, "outside the vocabulary"},
		{"over capacity", []Input{{Seq: seq, Tokens: make([]int, 14)}}, Options{}, "cache capacity 16"},
		{"nil sequence", []Input{{Tokens: []int{1}}}, Options{}, "no sequence"},
		{"foreign sequence", []Input{{Seq: mustSeq(t, other, 4), Tokens: []int{1}}}, Options{}, "no sequence of this model"},
		{"duplicate", []Input{{Seq: seq, Tokens: []int{1}}, {Seq: seq, Tokens: []int{1}}}, Options{}, "twice"},
		{"parent after node", []Input{{Seq: seq, Tokens: []int{1, 2}, Parents: []int{-1, 1}}}, Options{}, "parent 1"},
		{"parents length", []Input{{Seq: seq, Tokens: []int{1, 2}, Parents: []int{-1}}}, Options{}, "1 parents for 2"},
		{"pending", []Input{{Seq: pend, Tokens: []int{1}}}, Options{}, "uncommitted"},
		{"bad tap", []Input{{Seq: seq, Tokens: []int{1}}}, Options{Taps: []int{6}}, "not a hidden_states index"},
		{"bad logits mode", []Input{{Seq: seq, Tokens: []int{1}, Logits: 9}}, Options{}, "Logits mode"},
	}
	for _, c := range cases {
		_, err := m.Forward(c.batch, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
		if seq.Len() != 3 {
			t.Fatalf("%s: the failed pass changed the sequence length to %d", c.name, seq.Len())
		}
	}
	if _, err := m.NewSequence(m.MaxPositions() + 1); err == nil || !strings.Contains(err.Error(), "context length 2048") {
		t.Errorf("capacity past max_position_embeddings: %v", err)
	}
	if err := pend.Commit([]int{1}); err == nil || !strings.Contains(err.Error(), "not a path from the root") {
		t.Errorf("commit of a non-root node: %v", err)
	}
	if err := pend.Commit([]int{0, 5}); err == nil || !strings.Contains(err.Error(), "not one of the 2 pending") {
		t.Errorf("commit of a missing node: %v", err)
	}
	if err := seq.Truncate(4); err == nil {
		t.Errorf("truncate past the length succeeded")
	}
}

// TestLoadErrors checks config and weight problems are reported at load.
func TestLoadErrors(t *testing.T) {
	c := archCases()[1] // qwen3
	cfgOf := func(mod func(map[string]any)) map[string]any {
		cfg := map[string]any{}
		for k, v := range c.config {
			cfg[k] = v
		}
		mod(cfg)
		return cfg
	}
	base, err := checkpoint.LoadConfig(writeConfigOnly(t, c.config))
	if err != nil {
		t.Fatal(err)
	}
	w, shapes, err := RandomWeights(base, 1)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, cfg map[string]any, w map[string][]float32, shapes map[string][]int, want string) {
		t.Helper()
		_, err := Load(writeCheckpoint(t, cfg, w, shapes), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, want)
		}
	}
	check("unsupported rope scaling", cfgOf(func(m map[string]any) {
		m["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 4.0}
	}), w, shapes, "yarn")
	check("unsupported architecture", cfgOf(func(m map[string]any) { m["model_type"] = "gpt2" }), w, shapes, "gpt2")
	check("heads not multiple", cfgOf(func(m map[string]any) { m["num_key_value_heads"] = 4 }), w, shapes, "num_key_value_heads")
	// A tensor of the wrong shape.
	bad := map[string][]int{}
	for k, v := range shapes {
		bad[k] = v
	}
	bad["model.layers.1.self_attn.k_proj.weight"] = []int{48, 32}
	check("wrong shape", c.config, w, bad, "model.layers.1.self_attn.k_proj.weight")
	// A missing tensor.
	missing := map[string][]float32{}
	for k, v := range w {
		if k != "model.layers.2.self_attn.q_norm.weight" {
			missing[k] = v
		}
	}
	check("missing tensor", c.config, missing, shapes, "q_norm")
}

func writeConfigOnly(t *testing.T, cfg map[string]any) string {
	dir := writeCheckpoint(t, cfg, map[string][]float32{}, nil)
	return dir + "/config.json"
}
