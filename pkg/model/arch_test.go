package model

import (
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/arch"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
)

// TestSlidingWindowCapsContext: a Mistral whose sliding_window (4096) is
// below max_position_embeddings (32768) computes exactly only up to the
// window, since the model attends over the whole sequence; with
// sliding_window null the whole context is usable, and a Qwen model's
// sliding_window is not a window while use_sliding_window is false.
func TestSlidingWindowCapsContext(t *testing.T) {
	for file, want := range map[string]int{"mistral.json": 4096, "no_head_dim.json": 131072, "qwen2.json": 32768} {
		cfg, err := checkpoint.LoadConfig("../checkpoint/testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		m, err := newModel(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.MaxPositions() != want {
			t.Errorf("%s: MaxPositions %d, want %d", file, m.MaxPositions(), want)
		}
		if _, err := m.NewSequence(want + 1); err == nil {
			t.Errorf("%s: a sequence of %d positions was accepted", file, want+1)
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
		{func(f *arch.Family) { f.EmbedScale = arch.ScaleSqrtHidden }, "scaled embedding"},
		{func(f *arch.Family) { f.NormOffset = 1 }, "offset by 1"},
		{func(f *arch.Family) { f.ExtraNorms = []string{"pre_feedforward_layernorm.weight"} }, "extra norms pre_feedforward_layernorm.weight"},
		{func(f *arch.Family) { f.AttnSoftcap = 50 }, "attention soft-capping at 50"},
		{func(f *arch.Family) { f.FinalSoftcap = 30 }, "final logit soft-capping at 30"},
		{func(f *arch.Family) { f.Activation = "gelu_pytorch_tanh" }, `activation "gelu_pytorch_tanh"`},
	} {
		f := arch.Llama()
		f.ModelType = "gemma2"
		c.set(&f)
		err := implements(f)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "gemma2") {
			t.Errorf("want a refusal naming gemma2 and %q, got %v", c.want, err)
		}
	}
}
