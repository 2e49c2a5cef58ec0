package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// SaveOptions say what Save writes.
type SaveOptions struct {
	// Shape, Layers, DType and Seed choose the model as Options does: the
	// checkpoint holds the weights Run's model computes with.
	Shape  string
	Layers int
	DType  tensor.DType
	Seed   uint64

	// freeHost is Options.freeHost.
	freeHost func() (int64, error)
}

// Save writes the random model of o as a Hugging Face checkpoint into dir
// (created; files already there are replaced): config.json,
// generation_config.json, model.safetensors and a tokenizer (tokenizer.json,
// tokenizer_config.json) made for the shape's vocabulary (shapeTokenizer),
// so that every drafter command loads it. The weights are
// model.RandomWeights(config, Seed) rounded to DType, which is the model
// model.NewRandomAs builds in memory: both compute the same logits.
func Save(dir string, o SaveOptions) error {
	cfg, raw, err := ShapeConfig(o.Shape, o.Layers)
	if err != nil {
		return err
	}
	st, ok := map[tensor.DType]struct {
		st    safetensors.DType
		torch string
	}{tensor.BF16: {safetensors.BF16, "bfloat16"}, tensor.F16: {safetensors.F16, "float16"}, tensor.F32: {safetensors.F32, "float32"}}[o.DType]
	if !ok {
		return &SizeError{"dtype", fmt.Sprintf("%s: want bf16, f16 or f32", o.DType)}
	}
	// The float32 weights and their encoding in dtype are held together
	// while the file is written.
	n := cfg.NumParams() * int64(4+o.DType.Size())
	n += n/10 + gib
	free := o.freeHost
	if free == nil {
		free = hostAvailable
	}
	avail, err := free()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if n > avail {
		return &MemoryError{Shape: o.Shape, Where: "host", Need: n, Free: avail,
			What: fmt.Sprintf("float32 weights of %d parameters and their %s encoding", cfg.NumParams(), o.DType)}
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	c["torch_dtype"] = st.torch
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	w, shapes, err := model.RandomWeights(cfg, o.Seed)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	names := make([]string, 0, len(w))
	for n := range w {
		names = append(names, n)
	}
	sort.Strings(names)
	ts := make([]safetensors.Tensor, 0, len(names))
	for _, n := range names {
		t, err := safetensors.FloatTensor(n, st.st, shapes[n], w[n])
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		ts = append(ts, t)
		delete(w, n) // the float32 values are no longer needed
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	gen := map[string]any{"bos_token_id": cfg.BOS[0], "eos_token_id": cfg.EOS[0], "do_sample": false}
	if err := writeJSON(dir, "config.json", c); err != nil {
		return err
	}
	if err := writeJSON(dir, "generation_config.json", gen); err != nil {
		return err
	}
	return writeTokenizer(dir, cfg)
}

// writeJSON writes v as the indented JSON file name in dir.
func writeJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encoding %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// writeTokenizer writes shapeTokenizer's files into dir.
func writeTokenizer(dir string, cfg *checkpoint.Config) error {
	tok, tokCfg := shapeTokenizer(cfg)
	if err := writeJSON(dir, "tokenizer.json", tok); err != nil {
		return err
	}
	return writeJSON(dir, "tokenizer_config.json", tokCfg)
}

// shapeTokenizer returns a tokenizer.json and tokenizer_config.json whose
// vocabulary has exactly cfg's vocab_size ids, so that every id a random
// model generates decodes. It is a SentencePiece-style BPE with byte
// fallback, as stories260k's and Llama-2's: the three special tokens at
// the config's BOS and EOS ids and the lowest free id (<unk>), the 256 byte
// tokens <0x00>..<0xFF> and "▁" (a space) at the next free ids, so that any
// text encodes (byte by byte: there are no merges), and every other id a word piece
// "▁w<id>" that decodes to " w<id>". Text is therefore tokenized far longer
// than by the real tokenizer, which does not matter to a random model; what
// matters is that ids, not text, are what drafter's pipeline computes on.
func shapeTokenizer(cfg *checkpoint.Config) (tok, tokCfg map[string]any) {
	V := cfg.VocabSize
	bos, eos := cfg.BOS[0], cfg.EOS[0]
	taken := map[int]bool{bos: true, eos: true}
	next := 0
	free := func() int {
		for taken[next] {
			next++
		}
		taken[next] = true
		return next
	}
	unk := free()
	names := map[int]string{unk: "<unk>", bos: "<s>", eos: "</s>"}
	vocab := make(map[string]int, V)
	for id, n := range names {
		vocab[n] = id
	}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = free()
	}
	// The word boundary itself, which the decoder turns back into a space
	// (as a byte sequence it would decode to "▁").
	vocab["▁"] = free()
	for id := range V {
		if !taken[id] {
			vocab[fmt.Sprintf("▁w%d", id)] = id
		}
	}
	special := func(id int) map[string]any {
		return map[string]any{"id": id, "content": names[id], "single_word": false, "lstrip": false, "rstrip": false,
			"normalized": false, "special": true}
	}
	ids := []int{unk, bos, eos}
	sort.Ints(ids)
	added := make([]any, 0, 3)
	decoderAdded := map[string]any{}
	for _, id := range ids {
		added = append(added, special(id))
		sp := special(id)
		delete(sp, "id")
		decoderAdded[fmt.Sprint(id)] = sp
	}
	tok = map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added,
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"pre_tokenizer": nil,
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
				map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 1}}, map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}},
			"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []int{bos}, "tokens": []string{"<s>"}}},
		},
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": "<unk>", "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
			"vocab": vocab, "merges": []string{}},
	}
	tokCfg = map[string]any{
		"add_bos_token": true, "add_eos_token": false, "added_tokens_decoder": decoderAdded,
		"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": nil,
		"clean_up_tokenization_spaces": false, "legacy": true, "model_max_length": cfg.MaxPositions,
		"tokenizer_class": "LlamaTokenizerFast",
	}
	return tok, tokCfg
}
