package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// storiesJSON returns stories260k's tokenizer.json as a generic map to edit.
func storiesJSON(t *testing.T) map[string]any {
	t.Helper()
	testutil.Shared(t, "")
	return testutil.ReadJSON(t, filepath.Join(modelDir("stories260k"), "tokenizer.json"))
}

func loadEdited(t *testing.T, m map[string]any) (*Tokenizer, error) {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return Load(p)
}

func TestUnsupportedFeaturesRefused(t *testing.T) {
	cases := []struct {
		edit func(m map[string]any)
		want []string
	}{
		{func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" }, []string{"model.type", "WordPiece"}},
		{func(m map[string]any) { m["model"].(map[string]any)["type"] = "Unigram" }, []string{"model.type", "Unigram"}},
		{func(m map[string]any) { m["normalizer"] = map[string]any{"type": "BertNormalizer"} }, []string{"normalizer", "BertNormalizer"}},
		{func(m map[string]any) {
			m["normalizer"].(map[string]any)["normalizers"] = append(m["normalizer"].(map[string]any)["normalizers"].([]any), map[string]any{"type": "Precompiled"})
		}, []string{"normalizer.normalizers[2]", "Precompiled"}},
		{func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Whitespace"} }, []string{"pre_tokenizer", "Whitespace"}},
		{func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "Punctuation"}}}
		}, []string{"pre_tokenizer.pretokenizers[0]", "Punctuation"}},
		{func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "a"}, "behavior": "Shuffled"}
		}, []string{"pre_tokenizer.behavior", "Shuffled"}},
		{func(m map[string]any) { m["decoder"] = map[string]any{"type": "CTC"} }, []string{"decoder", "CTC"}},
		{func(m map[string]any) { m["post_processor"] = map[string]any{"type": "BertProcessing"} }, []string{"post_processor", "BertProcessing"}},
		{func(m map[string]any) { m["model"].(map[string]any)["dropout"] = 0.1 }, []string{"model.dropout"}},
		{func(m map[string]any) { m["truncation"] = map[string]any{"max_length": 5} }, []string{"truncation"}},
		{func(m map[string]any) { m["model"].(map[string]any)["merges"] = []any{"☃ x"} }, []string{"model.merges[0]", `"☃"`}},
		{func(m map[string]any) { m["model"].(map[string]any)["merges"] = []any{"a b c"} }, []string{"model.merges", "merge 0", "exactly one space"}},
		{func(m map[string]any) { m["model"].(map[string]any)["unk_token"] = "<nope>" }, []string{"model.unk_token", "<nope>"}},
	}
	for i, c := range cases {
		m := storiesJSON(t)
		c.edit(m)
		_, err := loadEdited(t, m)
		if err == nil {
			t.Errorf("case %d: no error", i)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("case %d: error %q does not mention %q", i, err, w)
			}
		}
	}
}

// TestMergesAsPairs checks that [a, b] merges load like "a b" ones.
func TestMergesAsPairs(t *testing.T) {
	m := storiesJSON(t)
	model := m["model"].(map[string]any)
	var pairs []any
	for _, s := range model["merges"].([]any) {
		a, b, _ := strings.Cut(s.(string), " ")
		pairs = append(pairs, []any{a, b})
	}
	model["merges"] = pairs
	tk, err := loadEdited(t, m)
	if err != nil {
		t.Fatal(err)
	}
	ref := tok(t, "stories260k")
	for _, c := range refCases(t, "stories260k") {
		if got := tk.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
			t.Fatalf("%q: %v, want %v", c.Text, got, c.IDs)
		}
	}
	if tk.VocabSize() != ref.VocabSize() {
		t.Fatalf("vocab size %d, want %d", tk.VocabSize(), ref.VocabSize())
	}
}

// TestAddedTokenFlags checks lstrip, rstrip and single_word (semantics of the
// tokenizers library: lstrip/rstrip absorb the white space next to the token,
// single_word only matches between non-word characters).
func TestAddedTokenFlags(t *testing.T) {
	m := storiesJSON(t)
	added := m["added_tokens"].([]any)
	added = append(added,
		map[string]any{"id": 512, "content": "<L>", "lstrip": true, "rstrip": false, "single_word": false, "normalized": false, "special": true},
		map[string]any{"id": 513, "content": "<R>", "lstrip": false, "rstrip": true, "single_word": false, "normalized": false, "special": true},
		map[string]any{"id": 514, "content": "cat", "lstrip": false, "rstrip": false, "single_word": true, "normalized": false, "special": false},
		map[string]any{"id": 515, "content": "<LONG>", "lstrip": false, "rstrip": false, "single_word": false, "normalized": false, "special": true},
		map[string]any{"id": 516, "content": "<LONGER>", "lstrip": false, "rstrip": false, "single_word": false, "normalized": false, "special": true},
	)
	m["added_tokens"] = added
	tk, err := loadEdited(t, m)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(s string) []int { return tk.Encode(s, false) }
	// lstrip: "a <L>b" is "a" + <L> + "b".
	if got, want := enc("a  <L>b"), slices.Concat(enc("a"), []int{512}, enc("b")); !slices.Equal(got, want) {
		t.Errorf("lstrip: %v, want %v", got, want)
	}
	if got, want := enc("a<R>  b"), slices.Concat(enc("a"), []int{513}, enc("b")); !slices.Equal(got, want) {
		t.Errorf("rstrip: %v, want %v", got, want)
	}
	if got := enc("a cat b"); !slices.Contains(got, 514) {
		t.Errorf("single_word between spaces: %v lacks 514", got)
	}
	if got := enc("concatenate"); slices.Contains(got, 514) {
		t.Errorf("single_word inside a word: %v contains 514", got)
	}
	if got := enc("x<LONGER>y"); !slices.Contains(got, 516) || slices.Contains(got, 515) {
		t.Errorf("longest match: %v", got)
	}
	_, offs := tk.EncodeOffsets("a  <L>b", false)
	ids := enc("a  <L>b")
	for i, id := range ids {
		if id == 512 && offs[i] != [2]int{1, 6} {
			t.Errorf("lstrip offsets %v, want [1 6] (the white space belongs to the token)", offs[i])
		}
	}
	if !tk.IsSpecial(512) || tk.IsSpecial(514) {
		t.Errorf("special flags wrong")
	}
	if got := tk.Decode([]int{512, 514}, true); got != "cat" {
		t.Errorf("skip special: %q", got)
	}
}

// TestMetaspace checks the Metaspace pre-tokenizer and decoder against the
// examples in the tokenizers library's own tests.
func TestMetaspace(t *testing.T) {
	st := &encState{cache: map[string]cachedWord{}}
	mp := &metaspacePreTokenizer{replacement: "▁", scheme: "always", splitOn: true}
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"Hey friend!", []string{"▁Hey", "▁friend!"}},
		{"Hey   friend!", []string{"▁Hey", "▁", "▁", "▁friend!"}},
	} {
		ns := &st.na
		ns.setOriginal(c.in, 0, true)
		out, pieces := mp.split(st, ns, []span{{0, int32(len(c.in))}}, true)
		var got []string
		for _, p := range pieces {
			got = append(got, string(out.s[p.a:p.b]))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
	// prepend_scheme "first" only prefixes the first section.
	mf := &metaspacePreTokenizer{replacement: "▁", scheme: "first", splitOn: false}
	ns := &st.na
	ns.setOriginal("a b", 0, false)
	out, pieces := mf.split(st, ns, []span{{0, 3}}, false)
	if got := string(out.s[pieces[0].a:pieces[0].b]); got != "a▁b" {
		t.Errorf("first scheme, later section: %q", got)
	}
	d := &metaspaceDecoder{replacement: "▁", stripFirst: true}
	got := d.decodeChain([]string{"▁Hey", "▁friend!"}, &decodeCtx{atStart: true, atEnd: true})
	if strings.Join(got, "") != "Hey friend!" {
		t.Errorf("decoder: %q", got)
	}
}

func TestLoadDirConfig(t *testing.T) {
	for _, c := range []struct {
		name, bos, eos string
		cleanUp        bool
		family         string
	}{
		{"llama3", "<|begin_of_text|>", "<|end_of_text|>", true, "byte-level"},
		{"qwen3", "", "<|im_end|>", false, "byte-level"},
		{"mistral", "<s>", "</s>", false, "sentencepiece"},
		{"llama2", "<s>", "</s>", true, "sentencepiece"},
		{"stories260k", "<s>", "</s>", false, "sentencepiece"},
	} {
		tk := tok(t, c.name)
		if tk.BOSToken() != c.bos || tk.EOSToken() != c.eos || tk.CleanUpSpaces() != c.cleanUp || tk.Family() != c.family {
			t.Errorf("%s: bos %q eos %q cleanup %v family %q", c.name, tk.BOSToken(), tk.EOSToken(), tk.CleanUpSpaces(), tk.Family())
		}
		if id, ok := tk.TokenID(c.eos); !ok || tk.Token(id) != c.eos || !tk.IsSpecial(id) {
			t.Errorf("%s: eos %q id %d ok %v", c.name, c.eos, id, ok)
		}
	}
	if tok(t, "llama3").VocabSize() != 128256 || tok(t, "qwen3").VocabSize() != 151669 {
		t.Errorf("vocab sizes %d %d", tok(t, "llama3").VocabSize(), tok(t, "qwen3").VocabSize())
	}
}

// TestSplitBehaviors uses the example of the tokenizers library's documentation of
// SplitDelimiterBehavior ("the-final--countdown" split on "-").
func TestSplitBehaviors(t *testing.T) {
	st := &encState{cache: map[string]cachedWord{}}
	in := "the-final--countdown"
	for _, c := range []struct {
		b      splitBehavior
		invert bool
		want   []string
	}{
		{behaviorRemoved, false, []string{"the", "final", "countdown"}},
		{behaviorIsolated, false, []string{"the", "-", "final", "-", "-", "countdown"}},
		{behaviorMergedWithPrevious, false, []string{"the-", "final-", "-", "countdown"}},
		{behaviorMergedWithNext, false, []string{"the", "-final", "-", "-countdown"}},
		{behaviorContiguous, false, []string{"the", "-", "final", "--", "countdown"}},
		{behaviorRemoved, true, []string{"-", "-", "-"}},
	} {
		sp := &splitPreTokenizer{pat: &literalPattern{lit: []byte("-")}, behavior: c.b, invert: c.invert}
		ns := &st.na
		ns.setOriginal(in, 0, false)
		out, pieces := sp.split(st, ns, append(st.pieces[:0], span{0, int32(len(in))}), true)
		var got []string
		for _, p := range pieces {
			got = append(got, string(out.s[p.a:p.b]))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("behavior %d invert %v: %q, want %q", c.b, c.invert, got, c.want)
		}
	}
}
