package model

import (
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/arch"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
)

// TestSlidingWindowContext: a Mistral whose sliding_window (4096) is below
// max_position_embeddings (32768) runs the whole context with the window on
// every layer; with sliding_window null no layer slides, and a Qwen model's
// sliding_window is not a window while use_sliding_window is false.
func TestSlidingWindowContext(t *testing.T) {
	for file, c := range map[string]struct{ ctx, window int }{
		"mistral.json": {32768, 4096}, "no_head_dim.json": {131072, 0}, "qwen2.json": {32768, 0}} {
		cfg, err := checkpoint.LoadConfig("../checkpoint/testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		m, err := newModel(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.MaxPositions() != c.ctx {
			t.Errorf("%s: MaxPositions %d, want %d", file, m.MaxPositions(), c.ctx)
		}
		for l := range m.Layers {
			if m.Layers[l].window != c.window {
				t.Errorf("%s: layer %d window %d, want %d", file, l, m.Layers[l].window, c.window)
			}
		}
		if _, err := m.NewSequence(c.ctx + 1); err == nil {
			t.Errorf("%s: a sequence of %d positions was accepted", file, c.ctx+1)
		}
	}
}

// TestUnimplementedHooksRefused: every family drafter lists is one the
// model implements, and a family asking for a hook the forward pass lacks
// is refused by name rather than run without it.
func TestUnimplementedHooksRefused(t *testing.T) {
	for _, f := range arch.Families() {
		if err := implements(f); err != nil {
			t.Errorf("%s: %v", f.ModelType, err)
		}
	}
	for _, c := range []struct {
		set  func(*arch.Family)
		want string
	}{
		{func(f *arch.Family) { f.EmbedScale = 7 }, "embedding scale 7"},
		{func(f *arch.Family) { f.Sliding = 9 }, "sliding rule 9"},
		{func(f *arch.Family) { f.Activation = "relu2" }, `activation "relu2"`},
	} {
		f := arch.Llama()
		f.ModelType = "nemotron"
		c.set(&f)
		err := implements(f)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "nemotron") {
			t.Errorf("want a refusal naming nemotron and %q, got %v", c.want, err)
		}
	}
}
