package fingerprint

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// benchConfig is a Llama with TinyLlama's widths and 10 layers, untied: 571M
// parameters, 1.14 GB of bf16 weights.
const benchConfig = `{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 10,
  "num_attention_heads": 32, "num_key_value_heads": 4, "hidden_act": "silu",
  "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "vocab_size": 32000, "bos_token_id": 1, "eos_token_id": 2,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16"
}`

// writeBenchModel writes benchConfig and random finite bf16 weights into dir
// and returns the bytes of tensor data.
func writeBenchModel(b *testing.B, dir string) int64 {
	b.Helper()
	cfgPath := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgPath, []byte(benchConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg, err := checkpoint.LoadConfig(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	specs := cfg.Tensors()
	var total int64
	for _, s := range specs {
		n := int64(2)
		for _, d := range s.Shape {
			n *= int64(d)
		}
		total += n
	}
	data := make([]byte, total)
	rand.NewChaCha8([32]byte{1}).Read(data)
	// Clearing the top exponent bit keeps every bf16 value finite (|x| < 2).
	for i := 0; i+1 < len(data); i += 2 {
		binary.LittleEndian.PutUint16(data[i:], binary.LittleEndian.Uint16(data[i:])&0xBFFF)
	}
	ts := make([]safetensors.Tensor, len(specs))
	off := int64(0)
	for i, s := range specs {
		n := int64(2)
		for _, d := range s.Shape {
			n *= int64(d)
		}
		ts[i] = safetensors.Tensor{Name: s.Name, DType: safetensors.BF16, Shape: s.Shape, Data: data[off : off+n]}
		off += n
	}
	if err := safetensors.WriteFile(filepath.Join(dir, safetensors.SingleFile), ts, nil); err != nil {
		b.Fatal(err)
	}
	return total
}

// BenchmarkFingerprint fingerprints a 1.14 GB bf16 checkpoint without a cache
// (every byte hashed; the file is in the page cache, having just been
// written) and with a warm one (no byte read). GB/s is tensor bytes per
// second of fingerprinting. Skipped with -short.
func BenchmarkFingerprint(b *testing.B) {
	if testing.Short() {
		b.Skip("writes a 1.14 GB checkpoint")
	}
	dir := b.TempDir()
	total := writeBenchModel(b, dir)
	ck, err := checkpoint.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer ck.Close()
	run := func(cache *filecache.Cache, wantHashed int64) func(*testing.B) {
		return func(b *testing.B) {
			b.SetBytes(total)
			for i := 0; i < b.N; i++ {
				r, err := Of(ck, cache)
				if err != nil {
					b.Fatal(err)
				}
				if r.Stats.HashedBytes != wantHashed {
					b.Fatalf("hashed %d bytes, want %d", r.Stats.HashedBytes, wantHashed)
				}
			}
			b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		}
	}
	b.Run("cold", run(nil, total))
	cache := filecache.New(b.TempDir())
	if _, err := Of(ck, cache); err != nil {
		b.Fatal(err)
	}
	b.Run("cached", run(cache, 0))
}
