package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// setLayers rewrites num_hidden_layers in dir/config.json.
func setLayers(t *testing.T, dir string, n int) {
	t.Helper()
	testutil.EditJSON(t, filepath.Join(dir, "config.json"), func(m map[string]any) { m["num_hidden_layers"] = n })
}

// TestConfigAndWeightsAgree: config.json must describe exactly the weights,
// in both directions (stories260k has 5 layers).
func TestConfigAndWeightsAgree(t *testing.T) {
	fewer := testutil.CopyDir(t, testutil.Stories260k())
	setLayers(t, fewer, 4)
	_, err := Open(fewer)
	testutil.WantErr(t, err, "model.layers.4.* (9 tensors) are in "+filepath.Join(fewer, "model.safetensors"),
		filepath.Join(fewer, "config.json")+" has num_hidden_layers 4", "4-layer model")

	three := testutil.CopyDir(t, testutil.Stories260k())
	setLayers(t, three, 3)
	_, err = Open(three)
	testutil.WantErr(t, err, "model.layers.3.* to model.layers.4.* (18 tensors)", "num_hidden_layers 3")

	more := testutil.CopyDir(t, testutil.Stories260k())
	setLayers(t, more, 6)
	_, err = Open(more)
	testutil.WantErr(t, err, "tensor model.layers.5.input_layernorm.weight is missing from "+filepath.Join(more, "model.safetensors"))
}

// add returns a mutation appending tensors.
func add(extra ...safetensors.Tensor) func([]safetensors.Tensor) []safetensors.Tensor {
	return func(ts []safetensors.Tensor) []safetensors.Tensor { return append(ts, extra...) }
}

func TestUnusedTensors(t *testing.T) {
	// llama3_rope.json: 4 layers, hidden 64, no attention bias, tied.
	var biases []safetensors.Tensor
	for l := range 4 {
		biases = append(biases, safetensors.F32Tensor(fmt.Sprintf("model.layers.%d.self_attn.q_proj.bias", l), []int{64}, make([]float32, 64)))
	}
	t.Run("biases the config does not use", func(t *testing.T) {
		dir := synthetic(t, "llama3_rope.json", add(biases...))
		_, err := Open(dir)
		testutil.WantErr(t, err, "model.layers.*.self_attn.q_proj.bias (4 layers) are in "+filepath.Join(dir, "model.safetensors"),
			"which the model", "does not use", "q/k/v bias=false")
	})
	t.Run("one stray tensor", func(t *testing.T) {
		_, err := Open(synthetic(t, "llama3_rope.json", add(safetensors.F32Tensor("model.layers.1.mlp.experts.0.weight", []int{2}, []float32{1, 2}),
			safetensors.F32Tensor("score.weight", []int{2, 64}, make([]float32, 128)))))
		testutil.WantErr(t, err, "model.layers.1.mlp.experts.0.weight, score.weight are in")
	})
	t.Run("rotary inv_freq buffers are allowed", func(t *testing.T) {
		var bufs []safetensors.Tensor
		for l := range 4 {
			bufs = append(bufs, safetensors.F32Tensor(fmt.Sprintf("model.layers.%d.self_attn.rotary_emb.inv_freq", l), []int{16}, make([]float32, 16)))
		}
		ck, err := Open(synthetic(t, "llama3_rope.json", add(bufs...)))
		if err != nil {
			t.Fatal(err)
		}
		ck.Close()
	})
	// The tied embedding written twice, as some exporters do.
	withHead := func(change bool) func([]safetensors.Tensor) []safetensors.Tensor {
		return func(ts []safetensors.Tensor) []safetensors.Tensor {
			for _, x := range ts {
				if x.Name == "model.embed_tokens.weight" {
					head := x
					head.Name = "lm_head.weight"
					head.Data = append([]byte(nil), x.Data...)
					if change {
						head.Data[len(head.Data)/2] ^= 1
					}
					return append(ts, head)
				}
			}
			t.Fatal("no embedding")
			return nil
		}
	}
	t.Run("tied lm_head equal to the embedding", func(t *testing.T) {
		ck, err := Open(synthetic(t, "llama3_rope.json", withHead(false)))
		if err != nil {
			t.Fatal(err)
		}
		ck.Close()
	})
	t.Run("tied lm_head that differs", func(t *testing.T) {
		dir := synthetic(t, "llama3_rope.json", withHead(true))
		_, err := Open(dir)
		testutil.WantErr(t, err, filepath.Join(dir, "model.safetensors")+" holds lm_head.weight", "tie_word_embeddings true",
			"model.embed_tokens.weight", "different values")
	})
}

// TestSharedModelsOpen: the checkpoints the tests and the README use still
// pass the stricter check.
func TestSharedModelsOpen(t *testing.T) {
	for _, dir := range []string{testutil.Stories260k(), testutil.SharedPath("models/stories260k-untied")} {
		if _, err := os.Stat(dir); err != nil {
			t.Logf("skipping %s: %v", dir, err)
			continue
		}
		ck, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		ck.Close()
	}
}
