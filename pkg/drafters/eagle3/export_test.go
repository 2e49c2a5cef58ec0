package eagle3

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
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

// norms31 lists the EAGLE-3.1 switch combinations: each norm before fc
// (they exclude each other) with and without norm_output, and norm_output
// alone.
func norms31() []Norms {
	return []Norms{{FCNorm: true}, {NormBeforeFC: true}, {NormOutput: true},
		{FCNorm: true, NormOutput: true}, {NormBeforeFC: true, NormOutput: true}}
}

// exportNorms31 exports a draft with the switches n in format into a new
// folder and returns it.
func exportNorms31(t *testing.T, n Norms, format string) (string, Geometry) {
	t.Helper()
	g := tinyGeometry()
	g.Norms = n
	counts := make([]int64, g.Vocab)
	for i := range counts {
		counts[i] = int64(i % 5)
	}
	voc, _ := BuildVocab(counts, g.DraftVocab)
	dir := t.TempDir()
	if err := Export(dir, g, exportParams(g, 1), voc, ExportOptions{Format: format, DefaultLayers: true}); err != nil {
		t.Fatal(err)
	}
	return dir, g
}

// TestExportNorms: every layout writes all four norm switches as top-level
// booleans (the native one also TensorRT-LLM's eagle_config spellings for
// an EAGLE-3.1 draft), the norms' weights under the keys the engines load,
// and LoadDraft reads the switches back.
func TestExportNorms(t *testing.T) {
	for _, n := range append([]Norms{{}}, norms31()...) {
		for _, format := range []string{FormatNative, FormatSpeculators} {
			dir, g := exportNorms31(t, n, format)
			var cfg map[string]any
			b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			for key, want := range map[string]bool{"fc_norm": n.FCNorm, "norm_before_fc": n.NormBeforeFC, "norm_output": n.NormOutput, "norm_before_residual": false} {
				if v, ok := cfg[key]; !ok || v != want {
					t.Errorf("%s %+v: config %s = %v (present %v), want %v", format, n, key, v, ok, want)
				}
			}
			eagle, _ := cfg["eagle_config"].(map[string]any)
			if format == FormatNative && n.Any() {
				if eagle["norm_before_fc"] != n.NormBeforeFC || eagle["return_hidden_post_norm"] != n.NormOutput {
					t.Errorf("%s %+v: eagle_config %v", format, n, eagle)
				}
			} else if eagle != nil {
				t.Errorf("%s %+v: eagle_config %v written", format, n, eagle)
			}
			set, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]int{}
			if n.FCNorm {
				for c := range Features {
					want[fmt.Sprintf("fc_norm.%d.weight", c)] = []int{g.Hidden}
				}
			}
			if n.NormBeforeFC {
				want["input_norm.weight"] = []int{3 * g.Hidden}
			}
			for _, name := range set.Names() {
				if strings.HasPrefix(name, "fc_norm.") || name == "input_norm.weight" {
					if _, ok := want[name]; !ok {
						t.Errorf("%s %+v: tensor %s written", format, n, name)
					}
				}
			}
			for name, shape := range want {
				if info, ok := set.Info(name); !ok || !reflect.DeepEqual(info.Shape, shape) || info.DType != safetensors.F32 {
					t.Errorf("%s %+v: %s is %+v (present %v), want F32 %v", format, n, name, info, ok, shape)
				}
			}
			set.Close()
			d, err := LoadDraft(dir, tensor.F32Matrix(make([]float32, g.Vocab*g.Hidden), g.Vocab, g.Hidden), nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.Geometry.Norms != n || d.Geometry.Variant() != map[bool]string{false: "eagle3", true: "eagle3.1"}[n.Any()] {
				t.Errorf("%s: loaded norms %+v (%s), want %+v", format, d.Geometry.Norms, d.Geometry.Variant(), n)
			}
		}
	}
}

// TestLoadRefusesNorms: a config whose norm switches disagree with the
// weights, or with each other, is refused, naming the file and the key.
func TestLoadRefusesNorms(t *testing.T) {
	embed := func(g Geometry) tensor.Matrix {
		return tensor.F32Matrix(make([]float32, g.Vocab*g.Hidden), g.Vocab, g.Hidden)
	}
	for _, c := range []struct {
		name   string
		n      Norms
		format string
		edit   func(cfg map[string]any)
		want   []string
	}{
		{"fc_norm true without its weights", Norms{}, FormatSpeculators, func(cfg map[string]any) { cfg["fc_norm"] = true },
			[]string{"config.json", `no tensor "fc_norm.0.weight"`, "fc_norm is true"}},
		{"fc_norm weights with fc_norm false", Norms{FCNorm: true}, FormatNative, func(cfg map[string]any) { cfg["fc_norm"] = false },
			[]string{"config.json", `"fc_norm.0.weight"`, "fc_norm is not true"}},
		{"fc_norm weights with fc_norm absent", Norms{FCNorm: true}, FormatSpeculators, func(cfg map[string]any) { delete(cfg, "fc_norm") },
			[]string{"config.json", `"fc_norm.0.weight"`, "fc_norm is not true"}},
		{"input_norm weight with norm_before_fc dropped", Norms{NormBeforeFC: true}, FormatNative, func(cfg map[string]any) {
			delete(cfg, "norm_before_fc")
			delete(cfg, "eagle_config")
		}, []string{"config.json", `"input_norm.weight"`, "norm_before_fc is not true"}},
		{"both norms before fc", Norms{FCNorm: true}, FormatSpeculators, func(cfg map[string]any) { cfg["norm_before_fc"] = true },
			[]string{"config.json", "fc_norm and norm_before_fc are both true", "mutually exclusive"}},
		{"eagle_config.norm_before_fc disagrees", Norms{NormBeforeFC: true}, FormatNative, func(cfg map[string]any) {
			cfg["eagle_config"].(map[string]any)["norm_before_fc"] = false
		}, []string{"config.json", "eagle_config.norm_before_fc is false but norm_before_fc is true"}},
		{"eagle_config.return_hidden_post_norm disagrees", Norms{NormOutput: true}, FormatNative, func(cfg map[string]any) { cfg["norm_output"] = false },
			[]string{"config.json", "eagle_config.return_hidden_post_norm is true but norm_output is false"}},
		{"norm_before_residual true (native)", Norms{}, FormatNative, func(cfg map[string]any) { cfg["norm_before_residual"] = true },
			[]string{"config.json", "norm_before_residual true"}},
		{"norm_before_residual true (speculators)", Norms{}, FormatSpeculators, func(cfg map[string]any) { cfg["norm_before_residual"] = true },
			[]string{"config.json", "norm_before_residual true"}},
	} {
		dir, g := exportNorms31(t, c.n, c.format)
		path := filepath.Join(dir, "config.json")
		b, _ := os.ReadFile(path)
		var cfg map[string]any
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		c.edit(cfg)
		b, _ = json.Marshal(cfg)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadDraft(dir, embed(g), nil)
		if err == nil {
			t.Errorf("%s: loaded", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.name, err, w)
			}
		}
	}
}

// TestProvenanceNorms: eval refuses an export whose norm switches or variant
// disagree with the drafter.json found for it, and accepts a drafter.json
// written before the switches existed (it records none of them).
func TestProvenanceNorms(t *testing.T) {
	dir, g := exportNorms31(t, Norms{FCNorm: true, NormOutput: true}, FormatNative)
	d, err := LoadDraft(dir, tensor.F32Matrix(make([]float32, g.Vocab*g.Hidden), g.Vocab, g.Hidden), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rec  string
		want string
	}{
		{`{"method":"eagle3"}`, ""},
		{`{"method":"eagle3","variant":"eagle3.1","fc_norm":true,"norm_before_fc":false,"norm_output":true}`, ""},
		{`{"method":"eagle3","variant":"eagle3"}`, "records variant eagle3, but the export"},
		{`{"method":"eagle3","fc_norm":false}`, "records fc_norm false, but the export"},
		{`{"method":"eagle3","norm_before_fc":true}`, "records norm_before_fc true"},
		{`{"method":"eagle3","norm_output":false}`, "records norm_output false"},
	} {
		err := checkProvenance(&drafters.Provenance{Path: "drafter.json", Data: []byte(c.rec)}, dir, FormatNative, d)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.rec, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want %q", c.rec, err, c.want)
		}
	}
}
