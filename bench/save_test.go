package bench

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tokenizer"
)

// A saved shape loads as a checkpoint whose model computes the logits of
// the model Run builds in memory, bit for bit, and whose tokenizer covers
// the vocabulary.
func TestSaveRoundTrip(t *testing.T) {
	dir := t.TempDir()
	const seed = 3
	if err := Save(dir, SaveOptions{Shape: "60m", Layers: 2, DType: tensor.BF16, Seed: seed}); err != nil {
		t.Fatal(err)
	}
	tg, err := target.Load(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	cfg, _, err := ShapeConfig("60m", 2)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := model.NewRandomAs(cfg, seed, tensor.BF16, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if tg.Model.NumLayers() != 2 || tg.Model.VocabSize() != 32000 || tg.Model.HiddenSize() != 512 {
		t.Fatalf("loaded %d layers, vocab %d, hidden %d", tg.Model.NumLayers(), tg.Model.VocabSize(), tg.Model.HiddenSize())
	}
	toks := tg.Tok.Encode("Once upon a time", true)
	logits := func(m *model.Model) []float32 {
		s, err := m.NewSequence(len(toks))
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.Forward([]model.Input{{Seq: s, Tokens: toks, Logits: model.LogitsAll}}, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), res.Logits...)
	}
	a, b := logits(tg.Model), logits(mem)
	if len(a) != len(toks)*32000 || len(a) != len(b) {
		t.Fatalf("%d and %d logits for %d tokens", len(a), len(b), len(toks))
	}
	spread := false
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("logit %d: loaded %v, in memory %v", i, a[i], b[i])
		}
		spread = spread || a[i] != a[0]
	}
	if !spread {
		t.Fatal("every logit is the same: the comparison shows nothing")
	}
	if len(tg.Stop) == 0 || tg.Stop[0] != 2 {
		t.Errorf("stop ids %v, want the config's eos 2", tg.Stop)
	}
}

// The shapes' tokenizer has exactly the vocabulary's ids, encodes any text
// (byte fallback) and decodes it back, and decodes every other id.
func TestShapeTokenizer(t *testing.T) {
	for _, shape := range []string{"60m", "llama3-1b"} {
		cfg, _, err := ShapeConfig(shape, 1)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := writeTokenizer(dir, cfg); err != nil {
			t.Fatal(err)
		}
		tok, err := tokenizer.LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if tok.VocabSize() != cfg.VocabSize {
			t.Errorf("%s: %d ids, want %d", shape, tok.VocabSize(), cfg.VocabSize)
		}
		text := "Once upon a time, été ✓"
		ids := tok.Encode(text, true)
		if ids[0] != cfg.BOS[0] {
			t.Errorf("%s: first id %d, want BOS %d", shape, ids[0], cfg.BOS[0])
		}
		if got := tok.Decode(ids, true); got != text {
			t.Errorf("%s: decoded %q, want %q", shape, got, text)
		}
		id := cfg.VocabSize - 1
		if got, want := tok.Decode([]int{id}, true), fmt.Sprintf("w%d", id); got != want {
			t.Errorf("%s: id %d decodes to %q, want %q", shape, id, got, want)
		}
		if !tok.IsSpecial(cfg.EOS[0]) || !tok.IsSpecial(cfg.BOS[0]) {
			t.Errorf("%s: BOS and EOS are not special", shape)
		}
	}
}

// Save refuses a shape whose weights do not fit the host's free memory,
// before drawing them.
func TestSaveMemoryRefusal(t *testing.T) {
	dir := t.TempDir()
	err := Save(dir, SaveOptions{Shape: "llama3-8b", DType: tensor.BF16, Seed: 1,
		freeHost: func() (int64, error) { return 20 << 30, nil }})
	var me *MemoryError
	if !errors.As(err, &me) || me.Need < 8_030_261_248*6 {
		t.Fatalf("error %v, want a MemoryError of at least 6 bytes a parameter", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a refused save wrote %d files", len(ents))
	}
}
