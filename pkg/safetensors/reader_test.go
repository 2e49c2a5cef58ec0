package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

func TestBadFiles(t *testing.T) {
	d8 := make([]byte, 8)
	cases := []struct {
		name string
		hdr  string
		data []byte
		want []string
	}{
		{"invalid json", `{"a": {"dtype": "F32",`, d8, []string{"invalid JSON header"}},
		{"not an object", `[1, 2]`, nil, []string{"not a JSON object"}},
		{"trailing garbage", `{} x`, nil, []string{"after the top-level object"}},
		{"invalid utf8", "{\"\xff\": 1}", nil, []string{"UTF-8"}},
		{"unknown dtype", `{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}`, d8, []string{`tensor "a"`, `unknown dtype "Q4"`, "BF16"}},
		{"byte count mismatch", `{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, d8, []string{`tensor "a"`, "needs 12 bytes", "span 8"}},
		{"offsets past end", `{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, d8, []string{`tensor "a"`, "[0, 16]", "past the end", "8 bytes"}},
		{"reversed offsets", `{"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}}`, d8, []string{`tensor "a"`, "invalid data_offsets [8, 0]"}},
		{"negative offset", `{"a":{"dtype":"U8","shape":[8],"data_offsets":[-1,7]}}`, d8, []string{`tensor "a"`, "invalid data_offsets"}},
		{"one offset", `{"a":{"dtype":"U8","shape":[8],"data_offsets":[8]}}`, d8, []string{`tensor "a"`, "[begin, end]"}},
		{"negative dim", `{"a":{"dtype":"U8","shape":[-8],"data_offsets":[0,8]}}`, d8, []string{`tensor "a"`, "negative dimension"}},
		{"huge shape", `{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}}`, d8, []string{`tensor "a"`, "too large"}},
		{"missing field", `{"a":{"dtype":"U8","shape":[8]}}`, d8, []string{`tensor "a"`, "data_offsets"}},
		{"bad entry", `{"a":{"dtype":"U8","shape":"8","data_offsets":[0,8]}}`, d8, []string{`tensor "a"`, "invalid header entry"}},
		{"overlap", `{"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, d8, []string{`"a" and "b" overlap`}},
		{"hole between", `{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, d8, []string{"hole", "[2, 4)", `"a" and "b"`}},
		{"hole at start", `{"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, d8, []string{"hole", "[0, 4)", `"b"`}},
		{"trailing bytes", `{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, d8, []string{"4 trailing bytes"}},
		{"duplicate key", `{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, d8, []string{`"a" appears twice`}},
		{"metadata not strings", `{"__metadata__":{"n":1}}`, nil, []string{"__metadata__"}},
		{"empty name", `{"":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, d8, []string{"empty name"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := rawFile(t, c.hdr, c.data)
			s, err := Open(p)
			if err == nil {
				s.Close()
			}
			testutil.WantErr(t, err, append([]string{p}, c.want...)...)
		})
	}
}

func TestBadLengthPrefix(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write("short", []byte{1, 2, 3})
	_, err := Open(p)
	testutil.WantErr(t, err, p, "3 bytes", "too short")

	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, 200<<20)
	p = write("huge", b)
	_, err = Open(p)
	testutil.WantErr(t, err, p, "header length 209715200", "limit")

	binary.LittleEndian.PutUint64(b, 9)
	p = write("long", b)
	_, err = Open(p)
	testutil.WantErr(t, err, p, "header length 9", "8 bytes that follow")
}

func TestTruncatedFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	if err := WriteFile(p, []Tensor{F32Tensor("w", []int{4, 4}, make([]float32, 16))}, nil); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	if err := os.Truncate(p, fi.Size()-3); err != nil {
		t.Fatal(err)
	}
	_, err := Open(p)
	testutil.WantErr(t, err, p, `tensor "w"`, "past the end", "truncated")
}

func TestRawFloat32AndClose(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	vals := []float32{1, -2.5, 3e-3, 65504}
	ts := []Tensor{
		F32Tensor("f32", []int{2, 2}, vals),
		F16Tensor("f16", []int{4}, vals),
		BF16Tensor("bf16", []int{1, 4}, vals),
		I64Tensor("i64", []int{3}, []int64{-1, 1 << 40, 7}),
		I32Tensor("i32", []int{2}, []int32{-5, 9}),
		BoolTensor("mask", []int{3}, []bool{true, false, true}),
		U8Tensor("u8", []int{2}, []byte{7, 255}),
		F32Tensor("scalar", nil, []float32{42}),
		F32Tensor("empty", []int{0, 3}, nil),
	}
	if err := WriteFile(p, ts, map[string]string{"format": "pt", "by": "drafter"}); err != nil {
		t.Fatal(err)
	}
	s, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	wantNames := []string{"bf16", "empty", "f16", "f32", "i32", "i64", "mask", "scalar", "u8"}
	if !slices.Equal(s.Names(), wantNames) {
		t.Fatalf("names %v, want %v", s.Names(), wantNames)
	}
	if m := s.Metadata(); len(m) != 2 || m["format"] != "pt" || m["by"] != "drafter" {
		t.Fatalf("metadata %v", m)
	}
	f, shape, err := s.Float32("f32")
	if err != nil || !slices.Equal(shape, []int{2, 2}) || !slices.Equal(f, vals) {
		t.Fatalf("f32: %v %v %v", f, shape, err)
	}
	// F16: 1, -2.5 and 65504 are exact halves; 3e-3 = 1572.86 * 2^-19 (the half step at
	// that exponent) rounds to 1573 * 2^-19.
	f, _, err = s.Float32("f16")
	if err != nil || f[0] != 1 || f[1] != -2.5 || f[2] != 1573.0/(1<<19) || f[3] != 65504 {
		t.Fatalf("f16: %v %v", f, err)
	}
	// BF16: 65504 rounds to 65536 (bf16 has 8 significant bits); 3e-3 = 196.6 * 2^-16
	// rounds to 197 * 2^-16.
	f, _, err = s.Float32("bf16")
	if err != nil || f[0] != 1 || f[1] != -2.5 || f[2] != 197.0/(1<<16) || f[3] != 65536 {
		t.Fatalf("bf16: %v %v", f, err)
	}
	i64, _, err := s.Int64("i64")
	if err != nil || fmt.Sprint(i64) != "[-1 1099511627776 7]" {
		t.Fatalf("i64: %v %v", i64, err)
	}
	i32, _, err := s.Int32("i32")
	if err != nil || fmt.Sprint(i32) != "[-5 9]" {
		t.Fatalf("i32: %v %v", i32, err)
	}
	_, _, err = s.Int32("i64")
	testutil.WantErr(t, err, `"i64"`, "element 1", "does not fit in int32")
	wide, _, err := s.Int64("i32")
	if err != nil || fmt.Sprint(wide) != "[-5 9]" {
		t.Fatalf("i32 as i64: %v %v", wide, err)
	}
	mask, _, err := s.Bool("mask")
	if err != nil || fmt.Sprint(mask) != "[true false true]" {
		t.Fatalf("mask: %v %v", mask, err)
	}
	raw, info, err := s.Raw("u8")
	if err != nil || info.DType != U8 || string(raw) != "\x07\xff" || info.File != p {
		t.Fatalf("u8: %v %+v %v", raw, info, err)
	}
	f, shape, err = s.Float32("scalar")
	if err != nil || len(shape) != 0 || len(f) != 1 || f[0] != 42 {
		t.Fatalf("scalar: %v %v %v", f, shape, err)
	}
	f, shape, err = s.Float32("empty")
	if err != nil || fmt.Sprint(shape) != "[0 3]" || len(f) != 0 {
		t.Fatalf("empty: %v %v %v", f, shape, err)
	}
	_, _, err = s.Float32("i64")
	testutil.WantErr(t, err, `"i64"`, p, "dtype I64", "F32, F16 and BF16")
	_, _, err = s.Float32("nope")
	testutil.WantErr(t, err, `no tensor "nope"`, p)
	testutil.WantErr(t, s.Float32Into("f32", make([]float32, 3)), `"f32"`, "4 elements", "destination has 3")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Raw("u8")
	testutil.WantErr(t, err, "closed")
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestWriterByteLayout checks the writer against a layout computed by hand from the
// specification rather than against our own reader.
func TestWriterByteLayout(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	// Given out of order: the file must list and lay out "a" before "b".
	err := WriteFile(p, []Tensor{
		I64Tensor("b", []int{1}, []int64{-2}),
		F32Tensor("a", []int{2}, []float32{1, -1}),
	}, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	hdr := `{"__metadata__":{"k":"v"},` +
		`"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` +
		`"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}}`
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	want := []byte{byte(len(hdr)), 0, 0, 0, 0, 0, 0, 0}
	want = append(want, hdr...)
	want = append(want, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x80, 0xbf) // 1.0f, -1.0f
	want = append(want, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff) // int64 -2
	if string(got) != string(want) {
		t.Fatalf("file bytes\n got %q\nwant %q", got, want)
	}
	// An independent reading with encoding/json of the header as a generic map.
	n := binary.LittleEndian.Uint64(got)
	if n%8 != 0 {
		t.Fatalf("header length %d not a multiple of 8", n)
	}
	var h map[string]any
	if err := json.Unmarshal(got[8:8+n], &h); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(h["a"]) != "map[data_offsets:[0 8] dtype:F32 shape:[2]]" {
		t.Fatalf("header entry a: %v", h["a"])
	}
	// No leftover temporary files.
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Fatalf("folder holds %d entries, want only the output", len(entries))
	}
}

func TestWriterRejects(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.safetensors")
	testutil.WantErr(t, WriteFile(p, []Tensor{F32Tensor("a", []int{1}, []float32{1}), F32Tensor("a", []int{1}, []float32{1})}, nil), `"a" given twice`)
	testutil.WantErr(t, WriteFile(p, []Tensor{{Name: "a", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}, nil), `"a"`, "needs 8 bytes", "has 4")
	testutil.WantErr(t, WriteFile(p, []Tensor{{Name: "a", DType: "F128", Shape: []int{1}, Data: make([]byte, 16)}}, nil), `unknown dtype "F128"`)
	testutil.WantErr(t, WriteFile(p, []Tensor{F32Tensor("__metadata__", []int{1}, []float32{1})}, nil), "invalid tensor name")
	testutil.WantErr(t, WriteFile(filepath.Join(p, "nodir", "x"), nil, nil), "writing")
	if _, err := os.Stat(p); err == nil {
		t.Fatal("a rejected write left a file behind")
	}
	_, err := FloatTensor("a", I64, []int{1}, []float32{1})
	testutil.WantErr(t, err, `"a"`, "I64")
}

// writeShards writes a sharded checkpoint: shards maps file name to tensors, index maps
// tensor name to file name.
func writeShards(t *testing.T, dir string, shards map[string][]Tensor, index map[string]string) {
	t.Helper()
	for name, ts := range shards {
		if err := WriteFile(filepath.Join(dir, name), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": index})
	if err := os.WriteFile(filepath.Join(dir, IndexFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestShardedFolder(t *testing.T) {
	a := F32Tensor("a", []int{2}, []float32{1, 2})
	b := BF16Tensor("b", []int{1}, []float32{3})
	c := I64Tensor("c", []int{1}, []int64{4})
	s1, s2 := "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"

	dir := t.TempDir()
	writeShards(t, dir, map[string][]Tensor{s1: {a, b}, s2: {c}}, map[string]string{"a": s1, "b": s1, "c": s2})
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if fmt.Sprint(s.Names()) != "[a b c]" || len(s.Files()) != 2 || s.Metadata()["format"] != "pt" {
		t.Fatalf("names %v files %v meta %v", s.Names(), s.Files(), s.Metadata())
	}
	if v, _, err := s.Float32("b"); err != nil || v[0] != 3 {
		t.Fatalf("b: %v %v", v, err)
	}
	if v, _, err := s.Int64("c"); err != nil || v[0] != 4 {
		t.Fatalf("c: %v %v", v, err)
	}
	if in, _ := s.Info("c"); in.File != filepath.Join(dir, s2) {
		t.Fatalf("c is in %s", in.File)
	}

	t.Run("missing shard", func(t *testing.T) {
		dir := t.TempDir()
		writeShards(t, dir, map[string][]Tensor{s1: {a, b}}, map[string]string{"a": s1, "b": s1, "c": s2})
		_, err := OpenDir(dir)
		testutil.WantErr(t, err, "shard "+s2, "missing", IndexFile)
	})
	t.Run("tensor not in named shard", func(t *testing.T) {
		dir := t.TempDir()
		writeShards(t, dir, map[string][]Tensor{s1: {a}, s2: {c}}, map[string]string{"a": s1, "b": s1, "c": s2})
		_, err := OpenDir(dir)
		testutil.WantErr(t, err, `tensor "b"`, s1, "no shard holds it")
	})
	t.Run("tensor in another shard", func(t *testing.T) {
		dir := t.TempDir()
		writeShards(t, dir, map[string][]Tensor{s1: {a}, s2: {b, c}}, map[string]string{"a": s1, "b": s1, "c": s2})
		_, err := OpenDir(dir)
		testutil.WantErr(t, err, `tensor "b"`, "maps", "but it is in", s2)
	})
	t.Run("duplicate across shards", func(t *testing.T) {
		dir := t.TempDir()
		writeShards(t, dir, map[string][]Tensor{s1: {a, b}, s2: {b, c}}, map[string]string{"a": s1, "b": s1, "c": s2})
		_, err := OpenDir(dir)
		testutil.WantErr(t, err, `tensor "b" is in two shards`, s1, s2)
	})
	t.Run("bad shard", func(t *testing.T) {
		dir := t.TempDir()
		writeShards(t, dir, map[string][]Tensor{s1: {a, b}, s2: {c}}, map[string]string{"a": s1, "b": s1, "c": s2})
		if err := os.Truncate(filepath.Join(dir, s2), 4); err != nil {
			t.Fatal(err)
		}
		_, err := OpenDir(dir)
		testutil.WantErr(t, err, s2, "too short")
	})
	t.Run("escaping path", func(t *testing.T) {
		dir := t.TempDir()
		writeShards(t, dir, nil, map[string]string{"a": "../x.safetensors"})
		_, err := OpenDir(dir)
		testutil.WantErr(t, err, `tensor "a"`, "../x.safetensors", "not a file inside")
	})
	t.Run("invalid index", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map": [`), 0o644)
		_, err := OpenDir(dir)
		testutil.WantErr(t, err, IndexFile, "invalid JSON")
	})
	t.Run("no weights", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), nil, 0o644)
		_, err := OpenDir(dir)
		testutil.WantErr(t, err, dir, "neither model.safetensors nor", "adapter_model.safetensors")
	})
}

// The bundled model, committed in the repository, and the reference copy in
// the shared reference data.
func TestStories260k(t *testing.T) {
	t.Run("bundled", func(t *testing.T) { checkStories260k(t, testutil.Stories260k()) })
	t.Run("shared", func(t *testing.T) {
		checkStories260k(t, testutil.Shared(t, "models/stories260k"))
	})
}

// checkStories260k opens the model's weights and checks every tensor's name, dtype and
// shape against its config.json, read here with encoding/json.
func checkStories260k(t *testing.T, dir string) {
	cfgBytes, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatalf("the bundled model must be present: %v", err)
	}
	var cfg struct {
		Hidden, Inter, Layers, Heads, KV, HeadDim, Vocab int
	}
	var raw map[string]any
	json.Unmarshal(cfgBytes, &raw)
	cfg.Hidden = int(raw["hidden_size"].(float64))
	cfg.Inter = int(raw["intermediate_size"].(float64))
	cfg.Layers = int(raw["num_hidden_layers"].(float64))
	cfg.Heads = int(raw["num_attention_heads"].(float64))
	cfg.KV = int(raw["num_key_value_heads"].(float64))
	cfg.HeadDim = int(raw["head_dim"].(float64))
	cfg.Vocab = int(raw["vocab_size"].(float64))

	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := map[string]string{
		"model.embed_tokens.weight": fmt.Sprint([]int{cfg.Vocab, cfg.Hidden}),
		"model.norm.weight":         fmt.Sprint([]int{cfg.Hidden}),
	}
	for i := 0; i < cfg.Layers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		want[p+"input_layernorm.weight"] = fmt.Sprint([]int{cfg.Hidden})
		want[p+"post_attention_layernorm.weight"] = fmt.Sprint([]int{cfg.Hidden})
		want[p+"self_attn.q_proj.weight"] = fmt.Sprint([]int{cfg.Heads * cfg.HeadDim, cfg.Hidden})
		want[p+"self_attn.k_proj.weight"] = fmt.Sprint([]int{cfg.KV * cfg.HeadDim, cfg.Hidden})
		want[p+"self_attn.v_proj.weight"] = fmt.Sprint([]int{cfg.KV * cfg.HeadDim, cfg.Hidden})
		want[p+"self_attn.o_proj.weight"] = fmt.Sprint([]int{cfg.Hidden, cfg.Heads * cfg.HeadDim})
		want[p+"mlp.gate_proj.weight"] = fmt.Sprint([]int{cfg.Inter, cfg.Hidden})
		want[p+"mlp.up_proj.weight"] = fmt.Sprint([]int{cfg.Inter, cfg.Hidden})
		want[p+"mlp.down_proj.weight"] = fmt.Sprint([]int{cfg.Hidden, cfg.Inter})
	}
	if s.Len() != len(want) {
		t.Fatalf("%d tensors, want %d: %v", s.Len(), len(want), s.Names())
	}
	for name, shape := range want {
		in, ok := s.Info(name)
		if !ok || fmt.Sprint(in.Shape) != shape || in.DType != F32 {
			t.Fatalf("%s: %+v (present %v), want F32 %s", name, in, ok, shape)
		}
	}
	emb, _, err := s.Float32("model.embed_tokens.weight")
	if err != nil {
		t.Fatal(err)
	}
	var nonzero int
	for _, v := range emb {
		if v != 0 {
			nonzero++
		}
	}
	if nonzero < len(emb)/2 {
		t.Fatalf("embedding has only %d nonzero values of %d", nonzero, len(emb))
	}
	if !strings.HasSuffix(s.Files()[0], SingleFile) {
		t.Fatalf("files %v", s.Files())
	}
}
