package fingerprint

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/filecache"
)

// of fingerprints the model in dir with cache (nil: none).
func of(t *testing.T, dir string, cache *filecache.Cache) *Result {
	t.Helper()
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r, err := Of(ck, cache)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func fp(t *testing.T, dir string) string {
	t.Helper()
	return of(t, dir, nil).Fingerprint
}

// edit rewrites dir/name with f applied to its bytes.
func edit(t *testing.T, dir, name string, f func([]byte) []byte) {
	t.Helper()
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, f(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// editJSON rewrites the JSON object in dir/name with f applied.
func editJSON(t *testing.T, dir, name string, f func(map[string]any)) {
	t.Helper()
	edit(t, dir, name, func(b []byte) []byte {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		out, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return out
	})
}

// tensorOffset returns where a tensor's bytes start in the bundled model's file.
func tensorOffset(t *testing.T, name string) int64 {
	t.Helper()
	ck, err := checkpoint.Open(testutil.Stories260k())
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	in, ok := ck.Weights.Info(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	return in.Offset + in.Size/2
}

func flip(off int64) func([]byte) []byte {
	return func(b []byte) []byte { b[off] ^= 1; return b }
}

func TestFingerprint(t *testing.T) {
	want := fp(t, testutil.Stories260k())
	if len(want) != 64 || strings.Trim(want, "0123456789abcdef") != "" {
		t.Fatalf("fingerprint %q is not 64 lowercase hex digits", want)
	}
	if again := fp(t, testutil.Stories260k()); again != want {
		t.Fatalf("fingerprint not stable: %s then %s", want, again)
	}
	copied := testutil.CopyDir(t, testutil.Stories260k())
	if got := fp(t, copied); got != want {
		t.Fatalf("copy in another folder: %s, want %s", got, want)
	}
	// Reformatting config.json (same values, other spacing) keeps it.
	edit(t, copied, "config.json", func(b []byte) []byte {
		var m map[string]any
		json.Unmarshal(b, &m)
		out, _ := json.Marshal(m)
		return out
	})
	if got := fp(t, copied); got != want {
		t.Fatalf("reformatted config: %s, want %s", got, want)
	}

	for _, c := range []struct {
		what   string
		change func(dir string)
	}{
		{"one embedding bit", func(dir string) {
			edit(t, dir, "model.safetensors", flip(tensorOffset(t, "model.embed_tokens.weight")))
		}},
		{"one bit of a body weight", func(dir string) {
			edit(t, dir, "model.safetensors", flip(tensorOffset(t, "model.layers.3.mlp.up_proj.weight")))
		}},
		{"one bit of a norm", func(dir string) {
			edit(t, dir, "model.safetensors", flip(tensorOffset(t, "model.norm.weight")))
		}},
		{"rope_theta", func(dir string) {
			editJSON(t, dir, "config.json", func(m map[string]any) { m["rope_theta"] = 20000.0 })
		}},
	} {
		dir := testutil.CopyDir(t, testutil.Stories260k())
		c.change(dir)
		if got := fp(t, dir); got == want {
			t.Errorf("changing %s kept the fingerprint", c.what)
		}
	}
	// A variant with an lm_head of its own, in the shared reference data only.
	untied := testutil.SharedPath("models/stories260k-untied")
	if _, err := os.Stat(untied); err == nil {
		if got := fp(t, untied); got == want {
			t.Fatal("tied and untied stories260k share a fingerprint")
		}
	}
}

// TestBodyFineTune: a fine-tune that changes only the decoder layers (a
// merged LoRA, an SFT with frozen embeddings) is another model.
func TestBodyFineTune(t *testing.T) {
	dir := testutil.CopyDir(t, testutil.Stories260k())
	testmodel.ScaleBody(t, dir, 0.9)
	orig, tuned := fp(t, testutil.Stories260k()), fp(t, dir)
	if orig == tuned {
		t.Fatalf("scaling every model.layers.* weight but the norms by 0.9 kept the fingerprint %s", orig)
	}
}

// TestSharding: the same tensors split over several files (with
// model.safetensors.index.json) give the same fingerprint, also through the
// per-file cache.
func TestSharding(t *testing.T) {
	want := fp(t, testutil.Stories260k())
	for _, n := range []int{2, 3} {
		dir := testutil.CopyDir(t, testutil.Stories260k())
		testmodel.Reshard(t, dir, n)
		cache := filecache.New(t.TempDir())
		for pass := range 2 {
			r := of(t, dir, cache)
			if r.Fingerprint != want {
				t.Fatalf("%d shards, pass %d: %s, want %s", n, pass, r.Fingerprint, want)
			}
			if fromCache := pass == 1; r.Stats.FromCache != fromCache {
				t.Fatalf("%d shards, pass %d: FromCache %v", n, pass, r.Stats.FromCache)
			}
		}
	}
}

// TestPromptingFiles: the tokenizer and chat template enter by content.
func TestPromptingFiles(t *testing.T) {
	want := fp(t, testutil.Stories260k())
	fresh := func() string { return testutil.CopyDir(t, testutil.Stories260k()) }
	same := func(what, dir string) {
		t.Helper()
		if got := fp(t, dir); got != want {
			t.Errorf("%s changed the fingerprint: %s, want %s", what, got, want)
		}
	}
	differs := func(what, dir, from string) string {
		t.Helper()
		got := fp(t, dir)
		if got == from {
			t.Errorf("%s kept the fingerprint %s", what, got)
		}
		return got
	}

	// Re-saved with other indentation and key order: same content.
	dir := fresh()
	edit(t, dir, "tokenizer.json", func(b []byte) []byte {
		var m map[string]any
		json.Unmarshal(b, &m)
		out, _ := json.MarshalIndent(m, "", "\t")
		return out
	})
	same("reformatting tokenizer.json", dir)
	dir = fresh()
	editJSON(t, dir, "tokenizer_config.json", func(map[string]any) {})
	same("reformatting tokenizer_config.json", dir)

	// Another token string is another tokenizer.
	dir = fresh()
	edit(t, dir, "tokenizer.json", func(b []byte) []byte {
		if !bytes.Contains(b, []byte(`"<unk>"`)) {
			t.Fatal("tokenizer.json has no <unk>")
		}
		return bytes.Replace(b, []byte(`"<unk>"`), []byte(`"<unknown>"`), -1)
	})
	differs("renaming a token in tokenizer.json", dir, want)
	dir = fresh()
	editJSON(t, dir, "tokenizer_config.json", func(m map[string]any) { m["clean_up_tokenization_spaces"] = true })
	differs("clean_up_tokenization_spaces", dir, want)

	// A chat template, wherever chat.Load finds it, counts by content.
	tmpl := "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
	inConfig := fresh()
	editJSON(t, inConfig, "tokenizer_config.json", func(m map[string]any) { m["chat_template"] = tmpl })
	withTemplate := differs("adding a chat template", inConfig, want)
	inJinja := fresh()
	if err := os.WriteFile(filepath.Join(inJinja, "chat_template.jinja"), []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := fp(t, inJinja); got != withTemplate {
		t.Errorf("the same template in chat_template.jinja: %s, in tokenizer_config.json: %s", got, withTemplate)
	}
	edited := fresh()
	editJSON(t, edited, "tokenizer_config.json", func(m map[string]any) { m["chat_template"] = tmpl + " " })
	differs("editing the chat template", edited, withTemplate)
	// A template tokenizer_config.json holds but chat.Load ignores (the
	// .jinja file wins) does not count.
	shadowed := fresh()
	os.WriteFile(filepath.Join(shadowed, "chat_template.jinja"), []byte(tmpl), 0o644)
	editJSON(t, shadowed, "tokenizer_config.json", func(m map[string]any) { m["chat_template"] = "unused" })
	if got := fp(t, shadowed); got != withTemplate {
		t.Errorf("a template shadowed by chat_template.jinja changed the fingerprint")
	}
}

// TestNoTokenizerFiles: a folder with only config.json and weights has a
// fingerprint, different from the same weights with a tokenizer.
func TestNoTokenizerFiles(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(testutil.Stories260k(), f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	got := fp(t, dir)
	if len(got) != 64 || got == fp(t, testutil.Stories260k()) {
		t.Fatalf("weights without tokenizer files: %q", got)
	}
}

// TestCache: a second fingerprint of an unchanged folder reads no tensor
// byte; a file rewritten with the same size and its modification time
// restored is hashed again.
func TestCache(t *testing.T) {
	dir := testutil.CopyDir(t, testutil.Stories260k())
	cache := filecache.New(t.TempDir())
	first := of(t, dir, cache)
	if first.Stats.HashedBytes != first.Stats.TensorBytes || first.Stats.FromCache || first.Stats.TensorBytes == 0 {
		t.Fatalf("first run: %+v", first.Stats)
	}
	second := of(t, dir, cache)
	if second.Stats.HashedBytes != 0 || !second.Stats.FromCache || second.Fingerprint != first.Fingerprint {
		t.Fatalf("second run: %+v, fingerprint %s want %s", second.Stats, second.Fingerprint, first.Fingerprint)
	}
	if !strings.Contains(second.Stats.String(), "from cache") {
		t.Fatalf("stats text: %s", second.Stats)
	}

	path := filepath.Join(dir, "model.safetensors")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // let the change time move on coarse clocks
	edit(t, dir, "model.safetensors", flip(tensorOffset(t, "model.layers.1.self_attn.o_proj.weight")))
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.Stat(path); now.Size() != st.Size() || !now.ModTime().Equal(st.ModTime()) {
		t.Fatal("the rewrite did not keep size and modification time")
	}
	third := of(t, dir, cache)
	if third.Stats.HashedBytes != third.Stats.TensorBytes || third.Fingerprint == first.Fingerprint {
		t.Fatalf("rewritten file: %+v, fingerprint %s (was %s)", third.Stats, third.Fingerprint, first.Fingerprint)
	}
	if want := fp(t, dir); third.Fingerprint != want {
		t.Fatalf("after the rewrite: cached run %s, uncached %s", third.Fingerprint, want)
	}
}

func TestCanonicalJSON(t *testing.T) {
	a, err := canonicalJSON([]byte(`{"b": [1, 2.50, 1e2], "a": {"y": "<&>", "x": null}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := canonicalJSON([]byte("{\"a\":{\"x\":null,\"y\":\"<&>\"},\n\"b\":[1,2.5,100.0], \"drop\": 1}"), "drop")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("%s vs %s", a, b)
	}
	for _, bad := range []string{`{"a": 1} {}`, `{"a": `, ``} {
		if _, err := canonicalJSON([]byte(bad), ""); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
