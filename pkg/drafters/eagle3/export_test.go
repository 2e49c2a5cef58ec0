package eagle3

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// tinyGeometry is a draft of hidden size 8 with grouped-query attention.
func tinyGeometry() Geometry {
	return Geometry{Hidden: 8, Heads: 2, KVHeads: 1, HeadDim: 4, Intermediate: 12, RMSNormEps: 1e-5,
		RopeTheta: 10000, MaxPositions: 64, Vocab: 16, DraftVocab: 10}
}

// exportParams returns parameters of geometry g to export: unit norm
// weights, the rest spread over [-0.5, 0.5) by a hash of their index and
// seed.
func exportParams(g Geometry, seed uint64) *Params {
	p := NewParams(g)
	for _, t := range p.Tensors(g) {
		for i := range t.Data {
			if len(t.Shape) == 1 {
				t.Data[i] = 1
			} else {
				t.Data[i] = float32((uint64(i)*2654435761+seed)%1000)/1000 - 0.5
			}
		}
	}
	return p
}

func TestExportLayout(t *testing.T) {
	g := tinyGeometry()
	counts := make([]int64, g.Vocab)
	for i := range counts {
		counts[i] = int64(i % 5)
	}
	voc, _ := BuildVocab(counts, g.DraftVocab)
	p := exportParams(g, 1)
	dir := t.TempDir()
	err := Export(dir, g, p, voc, ExportOptions{LayerIDs: []int{2, 4, 9}})
	if err != nil {
		t.Fatal(err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	want := map[string][]int{
		"fc.weight": {8, 24}, "midlayer.hidden_norm.weight": {8}, "midlayer.input_layernorm.weight": {8},
		"midlayer.self_attn.q_proj.weight": {8, 16}, "midlayer.self_attn.k_proj.weight": {4, 16},
		"midlayer.self_attn.v_proj.weight": {4, 16}, "midlayer.self_attn.o_proj.weight": {8, 8},
		"midlayer.post_attention_layernorm.weight": {8}, "midlayer.mlp.gate_proj.weight": {12, 8},
		"midlayer.mlp.up_proj.weight": {12, 8}, "midlayer.mlp.down_proj.weight": {8, 12}, "norm.weight": {8},
		"lm_head.weight": {10, 8}, "d2t": {10}, "t2d": {16},
	}
	if len(set.Names()) != len(want) {
		t.Fatalf("tensors %v, want exactly %d", set.Names(), len(want))
	}
	for name, shape := range want {
		info, ok := set.Info(name)
		if !ok || !reflect.DeepEqual(info.Shape, shape) {
			t.Fatalf("%s: %+v, want shape %v", name, info, shape)
		}
		wantType := safetensors.F32
		switch name {
		case "d2t":
			wantType = safetensors.I64
		case "t2d":
			wantType = safetensors.BOOL
		}
		if info.DType != wantType {
			t.Fatalf("%s has dtype %s, want %s", name, info.DType, wantType)
		}
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg["architectures"], []any{"LlamaForCausalLMEagle3"}) || cfg["tie_word_embeddings"] != false ||
		cfg["draft_vocab_size"] != 10.0 || cfg["vocab_size"] != 16.0 || cfg["num_hidden_layers"] != 1.0 {
		t.Fatalf("native config: %v", cfg)
	}
	if !reflect.DeepEqual(cfg["eagle_config"], map[string]any{"eagle_aux_hidden_state_layer_ids": []any{1.0, 3.0, 8.0}}) ||
		!reflect.DeepEqual(cfg["eagle_aux_hidden_state_layer_ids"], []any{2.0, 4.0, 9.0}) {
		t.Fatalf("layer ids written as %v / %v", cfg["eagle_config"], cfg["eagle_aux_hidden_state_layer_ids"])
	}
	if _, err := os.Stat(filepath.Join(dir, "drafter.json")); err == nil {
		t.Fatal("Export wrote drafter.json into the export folder; Train writes it at the top of its output folder")
	}
	// Speculators layout with default layers: no ids, norm_before_residual false.
	dir2 := t.TempDir()
	if err := Export(dir2, g, p, voc, ExportOptions{Format: FormatSpeculators, DefaultLayers: true, TargetName: "x"}); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(dir2, "config.json"))
	cfg = nil
	json.Unmarshal(b, &cfg)
	if v, ok := cfg["norm_before_residual"]; !ok || v != false {
		t.Fatalf("speculators config lacks norm_before_residual false: %s", b)
	}
	if _, ok := cfg["eagle_aux_hidden_state_layer_ids"]; ok {
		t.Fatal("default layers written into the speculators config")
	}
	if !bytes.Contains(b, []byte(`"speculators_model_type": "eagle3"`)) {
		t.Fatalf("speculators config: %s", b)
	}
	set2, err := safetensors.OpenDir(dir2)
	if err != nil {
		t.Fatal(err)
	}
	defer set2.Close()
	if _, ok := set2.Info("layers.0.self_attn.q_proj.weight"); !ok {
		t.Fatalf("speculators tensors: %v", set2.Names())
	}
}

// TestExportRefuses: a draft with a NaN or infinite weight, and feature
// layers out of order, repeated or naming the embedding output, are not
// exported; nothing is written.
func TestExportRefuses(t *testing.T) {
	g := tinyGeometry()
	counts := make([]int64, g.Vocab)
	voc, _ := BuildVocab(counts, g.DraftVocab)
	for _, c := range []struct {
		set    func(p *Params)
		layers []int
		want   []string
	}{
		{func(p *Params) { p.Gate[17] = float32(math.NaN()) }, []int{1, 2, 3}, []string{"non-finite", `mlp.gate_proj.weight" (F32 [12, 8]) holds NaN at element 17 (index [2, 1])`}},
		{func(p *Params) { p.FC[0] = float32(math.Inf(1)) }, []int{1, 2, 3}, []string{"non-finite", `"fc.weight" (F32 [8, 24]) holds +Inf at element 0`}},
		{func(*Params) {}, []int{5, 3, 1}, []string{"feature layers [5 3 1]: not strictly increasing", "ascending layer order"}},
		{func(*Params) {}, []int{3, 3, 3}, []string{"feature layers [3 3 3]: not strictly increasing"}},
		{func(*Params) {}, []int{0, 3, 4}, []string{"layer 0 is not a decoder layer's output"}},
	} {
		for _, format := range []string{FormatNative, FormatSpeculators} {
			p := exportParams(g, 1)
			c.set(p)
			dir := filepath.Join(t.TempDir(), "eagle3")
			err := Export(dir, g, p, voc, ExportOptions{Format: format, LayerIDs: c.layers})
			if err == nil {
				t.Fatalf("%s %v: exported", format, c.want)
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q lacks %q", format, err, w)
				}
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s: the refused export created %s (%v)", format, dir, err)
			}
		}
	}
}
