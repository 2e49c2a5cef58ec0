package checkpoint

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/arch"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

func TestOpenStories260k(t *testing.T) {
	ck, err := Open(testutil.Stories260k())
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	c := ck.Config
	// The geometry models/stories260k/ORIGIN.md states for this model.
	got := fmt.Sprint([]any{c.ModelType, c.HiddenSize, c.NumLayers, c.NumHeads, c.NumKVHeads, c.HeadDim, c.IntermediateSize, c.VocabSize, c.TieWordEmbeddings, c.RopeScaling == nil})
	if got != "[llama 64 5 8 4 8 172 512 true true]" {
		t.Fatalf("config: %s", got)
	}
	if c.RMSNormEps != 1e-5 || c.RopeTheta != 10000 || fmt.Sprint(c.BOS, c.EOS) != "[1] [2]" {
		t.Fatalf("eps %v theta %v bos %v eos %v", c.RMSNormEps, c.RopeTheta, c.BOS, c.EOS)
	}
	if ck.Generation == nil || fmt.Sprint(ck.Generation.EOS) != "[2]" || ck.Generation.HasTemperature {
		t.Fatalf("generation config: %+v", ck.Generation)
	}
	// The parameter count must equal the element count of every tensor in the file.
	var n int64
	for _, name := range ck.Weights.Names() {
		in, _ := ck.Weights.Info(name)
		n += int64(in.NumElements())
	}
	if c.NumParams() != n {
		t.Fatalf("NumParams %d, file holds %d", c.NumParams(), n)
	}
}

func TestOpenStories260kUntied(t *testing.T) {
	// A variant with an lm_head of its own, in the shared reference data only.
	ck, err := Open(testutil.Shared(t, "models/stories260k-untied"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.Config.TieWordEmbeddings {
		t.Fatal("untied model reads as tied")
	}
	if _, ok := ck.Config.TensorShapes()["lm_head.weight"]; !ok {
		t.Fatal("untied model needs lm_head.weight")
	}
}

func TestOpenMissingConfig(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(dir)
	testutil.WantErr(t, err, "config.json is missing in "+dir)
}

// synthetic writes config fixture file and random tensors for it into a new folder,
// applying mutate to the tensor list first.
func synthetic(t *testing.T, fixture string, mutate func([]safetensors.Tensor) []safetensors.Tensor) string {
	t.Helper()
	cfg, err := LoadConfig(filepath.Join("testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(1))
	var ts []safetensors.Tensor
	for _, spec := range cfg.Tensors() {
		n := 1
		for _, d := range spec.Shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		ts = append(ts, safetensors.BF16Tensor(spec.Name, spec.Shape, v))
	}
	if mutate != nil {
		ts = mutate(ts)
	}
	dir := t.TempDir()
	testutil.CopyFile(t, filepath.Join("testdata", fixture), filepath.Join(dir, "config.json"))
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestOpenSynthetic(t *testing.T) {
	for _, f := range []string{"llama3_rope.json", "linear_rope.json", "qwen2.json", "qwen3.json", "mistral.json", "no_head_dim.json"} {
		t.Run(f, func(t *testing.T) {
			ck, err := Open(synthetic(t, f, nil))
			if err != nil {
				t.Fatal(err)
			}
			if ck.Generation != nil {
				t.Fatal("no generation_config.json was written")
			}
			ck.Close()
		})
	}
}

func TestOpenBadWeights(t *testing.T) {
	drop := func(name string) func([]safetensors.Tensor) []safetensors.Tensor {
		return func(ts []safetensors.Tensor) []safetensors.Tensor {
			var out []safetensors.Tensor
			for _, x := range ts {
				if x.Name != name {
					out = append(out, x)
				}
			}
			return out
		}
	}
	replace := func(x safetensors.Tensor) func([]safetensors.Tensor) []safetensors.Tensor {
		return func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(drop(x.Name)(ts), x)
		}
	}
	t.Run("missing qwen2 bias", func(t *testing.T) {
		dir := synthetic(t, "qwen2.json", drop("model.layers.1.self_attn.k_proj.bias"))
		_, err := Open(dir)
		testutil.WantErr(t, err, "tensor model.layers.1.self_attn.k_proj.bias is missing from "+filepath.Join(dir, "model.safetensors"), "q/k/v bias=true")
	})
	t.Run("missing qwen3 q_norm", func(t *testing.T) {
		_, err := Open(synthetic(t, "qwen3.json", drop("model.layers.3.self_attn.q_norm.weight")))
		testutil.WantErr(t, err, "model.layers.3.self_attn.q_norm.weight is missing")
	})
	t.Run("missing lm_head", func(t *testing.T) {
		_, err := Open(synthetic(t, "mistral.json", drop("lm_head.weight")))
		testutil.WantErr(t, err, "lm_head.weight is missing", "tie_word_embeddings=false")
	})
	t.Run("wrong shape", func(t *testing.T) {
		dir := synthetic(t, "llama3_rope.json", replace(safetensors.F32Tensor("model.layers.0.self_attn.k_proj.weight", []int{64, 32}, make([]float32, 64*32))))
		_, err := Open(dir)
		testutil.WantErr(t, err, "model.layers.0.self_attn.k_proj.weight", filepath.Join(dir, "model.safetensors"), "shape [64, 32], expected [32, 64]", filepath.Join(dir, "config.json"))
	})
	t.Run("integer weight", func(t *testing.T) {
		_, err := Open(synthetic(t, "llama3_rope.json", replace(safetensors.I32Tensor("model.norm.weight", []int{64}, make([]int32, 64)))))
		testutil.WantErr(t, err, "model.norm.weight", "dtype I32", "F32, F16 or BF16")
	})
	t.Run("unsupported model type", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "gpt2"}`), 0o644)
		_, err := Open(dir)
		testutil.WantErr(t, err, `"gpt2" is not supported`, arch.Supported())
	})
	t.Run("no weights", func(t *testing.T) {
		dir := t.TempDir()
		testutil.CopyFile(t, "testdata/qwen3.json", filepath.Join(dir, "config.json"))
		_, err := Open(dir)
		testutil.WantErr(t, err, dir, "model.safetensors")
	})
	t.Run("bad generation config", func(t *testing.T) {
		dir := synthetic(t, "qwen3.json", nil)
		os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"top_k": -1}`), 0o644)
		_, err := Open(dir)
		testutil.WantErr(t, err, "generation_config.json", `"top_k"`)
	})
}

func TestOpenSharded(t *testing.T) {
	dir := synthetic(t, "qwen2.json", nil)
	s, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var a, b []safetensors.Tensor
	index := map[string]string{}
	for i, name := range s.Names() {
		raw, in, _ := s.Raw(name)
		x := safetensors.Tensor{Name: name, DType: in.DType, Shape: in.Shape, Data: append([]byte(nil), raw...)}
		if i%2 == 0 {
			a, index[name] = append(a, x), "model-00001-of-00002.safetensors"
		} else {
			b, index[name] = append(b, x), "model-00002-of-00002.safetensors"
		}
	}
	names := append([]string(nil), s.Names()...)
	s.Close()
	os.Remove(filepath.Join(dir, "model.safetensors"))
	safetensors.WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), a, nil)
	safetensors.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), b, nil)
	idx, _ := json.Marshal(map[string]any{"weight_map": index})
	os.WriteFile(filepath.Join(dir, safetensors.IndexFile), idx, 0o644)
	// The fingerprint's independence of sharding is tested in pkg/fingerprint.
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if !slices.Equal(ck.Weights.Names(), names) || len(ck.Weights.Files()) != 2 {
		t.Fatalf("sharded folder: tensors %v in %v", ck.Weights.Names(), ck.Weights.Files())
	}
}
