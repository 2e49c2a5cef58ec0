// Package testmodel holds the test helpers that need the module's own
// packages: model folders derived from a checkpoint (copies, a fine-tuned
// body, the weights in another dtype or split over several files) and runs of a loaded model
// (greedy continuations and teacher-forced hidden states, the captures tests
// train and check on). The helpers that need none are in internal/testutil.
package testmodel

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// read returns every tensor of dir/model.safetensors with its own copy of the
// bytes, or, for the float tensors where change is not nil and returns true
// or whose dtype differs from as ("" for each tensor's own), a tensor of the
// same name and shape holding change's values (or the file's) as as.
func read(tb testing.TB, dir string, as safetensors.DType, change func(name string, v []float32) bool) []safetensors.Tensor {
	tb.Helper()
	s, err := safetensors.Open(filepath.Join(dir, safetensors.SingleFile))
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	ts := make([]safetensors.Tensor, 0, s.Len())
	for _, name := range s.Names() {
		raw, in, err := s.Raw(name)
		if err != nil {
			tb.Fatal(err)
		}
		dt := in.DType
		if as != "" {
			dt = as
		}
		if (change != nil || dt != in.DType) && in.DType.IsFloat() {
			v, _, err := s.Float32(name)
			if err != nil {
				tb.Fatal(err)
			}
			if changed := change != nil && change(name, v); changed || dt != in.DType {
				t, err := safetensors.FloatTensor(name, dt, in.Shape, v)
				if err != nil {
					tb.Fatal(err)
				}
				ts = append(ts, t)
				continue
			}
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: in.DType, Shape: in.Shape, Data: append([]byte(nil), raw...)})
	}
	return ts
}

// ScaleBody multiplies every weight of the decoder layers (model.layers.*)
// except the norms by factor in dir/model.safetensors, keeping each tensor's
// dtype: what a fine-tune of the body only (a merged LoRA, an SFT with frozen
// embeddings) changes.
func ScaleBody(tb testing.TB, dir string, factor float32) {
	tb.Helper()
	ts := read(tb, dir, "", func(name string, v []float32) bool {
		if !strings.HasPrefix(name, "model.layers.") || strings.Contains(name, "norm") {
			return false
		}
		for i := range v {
			v[i] *= factor
		}
		return true
	})
	if err := safetensors.WriteFile(filepath.Join(dir, safetensors.SingleFile), ts, nil); err != nil {
		tb.Fatal(err)
	}
}

// Reshard replaces dir/model.safetensors with n shards
// model-0000i-of-0000n.safetensors (tensors dealt round-robin in name order)
// and a model.safetensors.index.json naming them.
func Reshard(tb testing.TB, dir string, n int) {
	tb.Helper()
	ts := read(tb, dir, "", nil)
	shards := make([][]safetensors.Tensor, n)
	index := map[string]string{}
	for i, x := range ts {
		shards[i%n] = append(shards[i%n], x)
		index[x.Name] = fmt.Sprintf("model-%05d-of-%05d.safetensors", i%n+1, n)
	}
	for i, s := range shards {
		if err := safetensors.WriteFile(filepath.Join(dir, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)), s, nil); err != nil {
			tb.Fatal(err)
		}
	}
	idx, err := json.Marshal(map[string]any{"weight_map": index})
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, safetensors.IndexFile), idx, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, safetensors.SingleFile)); err != nil {
		tb.Fatal(err)
	}
}

// Convert rewrites dir/model.safetensors with every float tensor stored as
// dt (F32, F16 or BF16; float32 values rounded to nearest, ties to even, as
// the Hugging Face conversions round): the same model as a checkpoint
// published in another dtype.
func Convert(tb testing.TB, dir string, dt safetensors.DType) {
	tb.Helper()
	if err := safetensors.WriteFile(filepath.Join(dir, safetensors.SingleFile), read(tb, dir, dt, nil), nil); err != nil {
		tb.Fatal(err)
	}
}
