// Command gguf converts a Hugging Face Llama-family checkpoint folder, or the
// deterministic random-weight benchmark model of pkg/model, to a float32 GGUF
// file (version 3) that llama.cpp loads, so that drafter's forward speed can be
// compared with llama.cpp's on exactly the same weights
// (scripts/llamacpp-compare.sh).
//
// Usage:
//
//	go run ./scripts/gguf -model models/stories260k -o /tmp/stories260k.gguf
//	go run ./scripts/gguf -bench60m -seed 1 -o /tmp/random60M.gguf
//
// The file carries the llama.* hyper-parameters, the tokenizer and the tensors
// under llama.cpp's names (token_embd, blk.N.attn_q, ..., output_norm, output).
// The rows of the query and key projections are reordered within each head:
// Hugging Face's rotate_half RoPE rotates the pair (i, i+d/2) of a head of
// width d, ggml's normal-mode RoPE rotates the adjacent pair (2i, 2i+1), so
// row i goes to 2i and row i+d/2 to 2i+1. With that, both engines compute the
// same function.
//
// A SentencePiece-style vocabulary (▁ and byte fallback, Llama-2, Mistral) is
// written as tokenizer.ggml.model "llama" with tokens, scores and token types;
// the scores rank each merged token by its merge's position in tokenizer.json
// (earlier merges score higher), which is what llama.cpp's SentencePiece
// tokenizer uses to pick merges. Byte-level BPE vocabularies are refused unless
// -synthetic-vocab asks for a placeholder vocabulary (speed measurements only:
// such a file cannot tokenize text correctly). The benchmark model always gets
// a placeholder vocabulary of its size.
//
// Supported: model_type llama or mistral without biases, q/k norms, sliding
// window or rope scaling other than linear. Anything else is refused with an
// error rather than converted into a file that computes something different.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/tokenizer"
)

// llama.cpp token types (llama_token_type).
const (
	tokNormal  = 1
	tokUnknown = 2
	tokControl = 3
	tokUnused  = 5
	tokByte    = 6
)

func main() {
	dir := flag.String("model", "", "Hugging Face checkpoint folder (config.json, safetensors, tokenizer.json)")
	bench := flag.Bool("bench60m", false, "write pkg/model's random-weight benchmark model (model.Bench60MConfig) instead of -model")
	seed := flag.Uint64("seed", 1, "seed of the -bench60m weights (pkg/model's benchmarks use 1)")
	synthetic := flag.Bool("synthetic-vocab", false, "write a placeholder vocabulary instead of the checkpoint's tokenizer (speed measurements only)")
	out := flag.String("o", "", "output .gguf path (required)")
	flag.Parse()
	if err := run(*dir, *bench, *seed, *synthetic, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gguf:", err)
		os.Exit(1)
	}
}

func run(dir string, bench bool, seed uint64, synthetic bool, out string) error {
	if out == "" {
		return errors.New("-o is required")
	}
	if (dir == "") == !bench {
		return errors.New("give exactly one of -model DIR and -bench60m")
	}
	f := &ggufFile{}
	if bench {
		cfg := model.Bench60MConfig()
		w, shapes, err := model.RandomWeights(cfg, seed)
		if err != nil {
			return fmt.Errorf("random weights: %w", err)
		}
		get := func(name string) ([]float32, []int, error) {
			data, ok := w[name]
			if !ok {
				return nil, nil, fmt.Errorf("model.RandomWeights has no tensor %q", name)
			}
			return data, shapes[name], nil
		}
		if err := convert(f, cfg, fmt.Sprintf("drafter random60M seed %d", seed), get); err != nil {
			return err
		}
		syntheticVocab(f, cfg)
	} else {
		ck, err := checkpoint.Open(dir)
		if err != nil {
			return err
		}
		defer ck.Close()
		if err := convert(f, ck.Config, filepath.Base(filepath.Clean(dir)), ck.Weights.Float32); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		if synthetic {
			syntheticVocab(f, ck.Config)
		} else if err := checkpointVocab(f, ck.Config, dir); err != nil {
			return err
		}
	}
	if err := f.WriteFile(out); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "gguf: wrote %s (%d tensors, %d metadata keys)\n", out, len(f.tensors), f.nkv)
	return nil
}

// convert adds the hyper-parameters and tensors of cfg; get reads a tensor by
// its Hugging Face name as float32.
func convert(f *ggufFile, cfg *checkpoint.Config, name string, get func(string) ([]float32, []int, error)) error {
	switch {
	case cfg.ModelType != "llama" && cfg.ModelType != "mistral":
		return fmt.Errorf("model_type %q: only llama and mistral convert to llama.cpp's llama architecture", cfg.ModelType)
	case cfg.AttentionBias || cfg.OProjBias:
		return errors.New("attention_bias: biases are not converted")
	case cfg.QKNorm:
		return errors.New("q/k norms are not converted")
	case cfg.SlidingWindow > 0 && cfg.SlidingWindow < cfg.MaxPositions:
		return fmt.Errorf("sliding_window %d < max_position_embeddings %d: llama.cpp's llama architecture attends to the whole context", cfg.SlidingWindow, cfg.MaxPositions)
	case cfg.RopeScaling != nil && cfg.RopeScaling.Type != "linear":
		return fmt.Errorf("rope_scaling type %q: only linear is converted", cfg.RopeScaling.Type)
	case cfg.HeadDim%2 != 0:
		return fmt.Errorf("head_dim %d: RoPE needs an even head width", cfg.HeadDim)
	}
	if mlpBias, _ := cfg.Raw["mlp_bias"].(bool); mlpBias {
		return errors.New("mlp_bias: biases are not converted")
	}
	f.String("general.architecture", "llama")
	f.String("general.name", name)
	f.Uint32("general.file_type", 0) // all float32
	f.Uint32("llama.context_length", uint32(cfg.MaxPositions))
	f.Uint32("llama.embedding_length", uint32(cfg.HiddenSize))
	f.Uint32("llama.block_count", uint32(cfg.NumLayers))
	f.Uint32("llama.feed_forward_length", uint32(cfg.IntermediateSize))
	f.Uint32("llama.attention.head_count", uint32(cfg.NumHeads))
	f.Uint32("llama.attention.head_count_kv", uint32(cfg.NumKVHeads))
	f.Uint32("llama.attention.key_length", uint32(cfg.HeadDim))
	f.Uint32("llama.attention.value_length", uint32(cfg.HeadDim))
	f.Float32("llama.attention.layer_norm_rms_epsilon", float32(cfg.RMSNormEps))
	f.Float32("llama.rope.freq_base", float32(cfg.RopeTheta))
	f.Uint32("llama.rope.dimension_count", uint32(cfg.HeadDim))
	f.Uint32("llama.vocab_size", uint32(cfg.VocabSize))
	if rs := cfg.RopeScaling; rs != nil {
		f.String("llama.rope.scaling.type", "linear")
		f.Float32("llama.rope.scaling.factor", float32(rs.Factor))
	}

	layer := regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)
	perLayer := map[string]string{
		"input_layernorm.weight":          "attn_norm.weight",
		"self_attn.q_proj.weight":         "attn_q.weight",
		"self_attn.k_proj.weight":         "attn_k.weight",
		"self_attn.v_proj.weight":         "attn_v.weight",
		"self_attn.o_proj.weight":         "attn_output.weight",
		"post_attention_layernorm.weight": "ffn_norm.weight",
		"mlp.gate_proj.weight":            "ffn_gate.weight",
		"mlp.up_proj.weight":              "ffn_up.weight",
		"mlp.down_proj.weight":            "ffn_down.weight",
	}
	for _, spec := range cfg.Tensors() {
		var gname string
		heads := 0 // > 0: reorder the rows of this many heads for ggml's RoPE
		switch spec.Name {
		case "model.embed_tokens.weight":
			gname = "token_embd.weight"
		case "model.norm.weight":
			gname = "output_norm.weight"
		case "lm_head.weight":
			gname = "output.weight"
		default:
			m := layer.FindStringSubmatch(spec.Name)
			if m == nil || perLayer[m[2]] == "" {
				return fmt.Errorf("tensor %s has no llama.cpp counterpart", spec.Name)
			}
			gname = "blk." + m[1] + "." + perLayer[m[2]]
			switch m[2] {
			case "self_attn.q_proj.weight":
				heads = cfg.NumHeads
			case "self_attn.k_proj.weight":
				heads = cfg.NumKVHeads
			}
		}
		// ggml lists dimensions innermost first: an [out, in] matrix is (in, out).
		dims := make([]uint64, len(spec.Shape))
		for i, d := range spec.Shape {
			dims[len(dims)-1-i] = uint64(d)
		}
		spec, hd := spec, cfg.HeadDim
		f.Tensor(gname, dims, func() ([]float32, error) {
			data, shape, err := get(spec.Name)
			if err != nil {
				return nil, err
			}
			if !slices.Equal(shape, spec.Shape) {
				return nil, fmt.Errorf("tensor %s has shape %v, want %v", spec.Name, shape, spec.Shape)
			}
			if heads > 0 {
				data = rotateHalfToInterleaved(data, heads, hd, spec.Shape[1])
			}
			return data, nil
		})
	}
	return nil
}

// rotateHalfToInterleaved returns a copy of the [heads*d, cols] projection w
// with the rows of each head reordered from Hugging Face's rotate_half pairing
// (row i with row i+d/2) to ggml's adjacent pairing: row i moves to 2i and row
// i+d/2 to 2i+1.
func rotateHalfToInterleaved(w []float32, heads, d, cols int) []float32 {
	out := make([]float32, len(w))
	half := d / 2
	for h := 0; h < heads; h++ {
		base := h * d
		for i := 0; i < half; i++ {
			copy(out[(base+2*i)*cols:(base+2*i+1)*cols], w[(base+i)*cols:(base+i+1)*cols])
			copy(out[(base+2*i+1)*cols:(base+2*i+2)*cols], w[(base+i+half)*cols:(base+i+half+1)*cols])
		}
	}
	return out
}

// syntheticVocab writes a placeholder SentencePiece vocabulary of
// cfg.VocabSize tokens: <unk>, <s>, </s>, the 256 byte tokens llama.cpp
// requires (it looks up <0x0A> for newlines) and unique filler pieces.
func syntheticVocab(f *ggufFile, cfg *checkpoint.Config) {
	n := cfg.VocabSize
	tokens := make([]string, n)
	scores := make([]float32, n)
	types := make([]int32, n)
	for i := range tokens {
		switch {
		case i == 0:
			tokens[i], types[i] = "<unk>", tokUnknown
		case i == 1:
			tokens[i], types[i] = "<s>", tokControl
		case i == 2:
			tokens[i], types[i] = "</s>", tokControl
		case i < 3+256:
			tokens[i], types[i] = fmt.Sprintf("<0x%02X>", i-3), tokByte
		default:
			tokens[i], types[i] = fmt.Sprintf("▁t%d", i), tokNormal
			scores[i] = -float32(i)
		}
	}
	f.String("tokenizer.ggml.model", "llama")
	f.Strings("tokenizer.ggml.tokens", tokens)
	f.Float32s("tokenizer.ggml.scores", scores)
	f.Int32s("tokenizer.ggml.token_type", types)
	f.Uint32("tokenizer.ggml.unknown_token_id", 0)
	f.Uint32("tokenizer.ggml.bos_token_id", 1)
	f.Uint32("tokenizer.ggml.eos_token_id", 2)
	f.Bool("tokenizer.ggml.add_bos_token", true)
	f.Bool("tokenizer.ggml.add_eos_token", false)
}

var byteToken = regexp.MustCompile(`^<0x[0-9A-F]{2}>$`)

// checkpointVocab writes the checkpoint's SentencePiece-style vocabulary.
func checkpointVocab(f *ggufFile, cfg *checkpoint.Config, dir string) error {
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		return err
	}
	if tok.Family() != "sentencepiece" {
		return fmt.Errorf("%s: a %s tokenizer is not converted (llama.cpp would pre-tokenize it differently); use -synthetic-vocab for speed measurements", dir, tok.Family())
	}
	n := tok.VocabSize()
	if n > cfg.VocabSize {
		return fmt.Errorf("%s: tokenizer has %d tokens, more than vocab_size %d", dir, n, cfg.VocabSize)
	}
	ranks, err := mergeRanks(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return err
	}
	unk := -1
	if id, ok := tok.TokenID("<unk>"); ok {
		unk = id
	}
	tokens := make([]string, cfg.VocabSize)
	scores := make([]float32, cfg.VocabSize)
	types := make([]int32, cfg.VocabSize)
	for id := range tokens {
		if id >= n {
			// Embedding rows beyond the tokenizer (padding): never produced.
			tokens[id], types[id], scores[id] = fmt.Sprintf("[PAD%d]", id), tokUnused, -1e9
			continue
		}
		s := tok.Token(id)
		if s == "" {
			return fmt.Errorf("%s: token id %d has no string (holes in the vocabulary are not converted)", dir, id)
		}
		tokens[id] = s
		switch {
		case id == unk:
			types[id] = tokUnknown
		case tok.IsSpecial(id):
			types[id] = tokControl
		case byteToken.MatchString(s):
			types[id] = tokByte
		default:
			types[id] = tokNormal
		}
		if r, ok := ranks[s]; ok {
			scores[id] = -float32(r)
		} else {
			// Not produced by any merge: single characters, bytes and
			// specials, which llama.cpp never merges into.
			scores[id] = -float32(len(ranks) + id)
		}
	}
	f.String("tokenizer.ggml.model", "llama")
	f.Strings("tokenizer.ggml.tokens", tokens)
	f.Float32s("tokenizer.ggml.scores", scores)
	f.Int32s("tokenizer.ggml.token_type", types)
	if unk >= 0 {
		f.Uint32("tokenizer.ggml.unknown_token_id", uint32(unk))
	}
	bos, hasBOS := -1, false
	if b := tok.BOSToken(); b != "" {
		bos, hasBOS = tok.TokenID(b)
	} else if len(cfg.BOS) > 0 {
		bos, hasBOS = cfg.BOS[0], true
	}
	if hasBOS {
		f.Uint32("tokenizer.ggml.bos_token_id", uint32(bos))
	}
	if e := tok.EOSToken(); e != "" {
		if id, ok := tok.TokenID(e); ok {
			f.Uint32("tokenizer.ggml.eos_token_id", uint32(id))
		}
	} else if len(cfg.EOS) > 0 {
		f.Uint32("tokenizer.ggml.eos_token_id", uint32(cfg.EOS[0]))
	}
	probe := tok.Encode("a", true)
	f.Bool("tokenizer.ggml.add_bos_token", hasBOS && len(probe) > 0 && probe[0] == bos)
	f.Bool("tokenizer.ggml.add_eos_token", len(probe) > 1 && len(cfg.EOS) > 0 && probe[len(probe)-1] == cfg.EOS[0])
	return nil
}

// mergeRanks reads model.merges of a tokenizer.json ("a b" strings or
// ["a", "b"] pairs) and returns, for each merged token, the position of the
// first merge that produces it.
func mergeRanks(path string) (map[string]int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read merges: %w", err)
	}
	var doc struct {
		Model struct {
			Merges []json.RawMessage `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: model.merges: %w", path, err)
	}
	ranks := make(map[string]int, len(doc.Model.Merges))
	for r, m := range doc.Model.Merges {
		var pair []string
		var s string
		if err := json.Unmarshal(m, &s); err == nil {
			pair = strings.SplitN(s, " ", 2)
		} else if err := json.Unmarshal(m, &pair); err != nil {
			return nil, fmt.Errorf("%s: model.merges[%d] is %s, want \"a b\" or [\"a\", \"b\"]", path, r, m)
		}
		if len(pair) != 2 {
			return nil, fmt.Errorf("%s: model.merges[%d] is %s, want two parts", path, r, m)
		}
		if _, seen := ranks[pair[0]+pair[1]]; !seen {
			ranks[pair[0]+pair[1]] = r
		}
	}
	return ranks, nil
}
