package dspark

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
)

func tinyGeometry() dflash.Geometry {
	return dflash.Geometry{Hidden: 8, Heads: 2, KVHeads: 1, HeadDim: 4, Intermediate: 12, Layers: 2, RMSNormEps: 1e-6,
		RopeTheta: 10000, MaxPositions: 64, Vocab: 11, TargetHidden: 8, Features: 2, BlockSize: 4, MaskToken: 10}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Both layouts load back exactly (every weight bit, geometry, heads, ids),
// each spelling the HF feature layers its own way: DeepSpec's
// target_layer_ids as output-of-layer ids (HF - 1), speculators'
// aux_hidden_state_layer_ids as HF indices, with sample_from_anchor true;
// and the layout is detected.
func TestExportRoundTrip(t *testing.T) {
	g := tinyGeometry()
	ids := []int{1, 4} // HF; 1 is the first layer's output, spelled 0 by DeepSpec
	for _, sh := range []HeadShape{{Rank: 3, Confidence: true, WithMarkov: true}, {Rank: 2, Confidence: true}, {Rank: 2}, {}} {
		d := randomDraft(t, g, sh, ids, 4, 3)
		for _, layout := range (Method{}).Layouts() {
			dir := filepath.Join(t.TempDir(), layout)
			if err := Export(dir, d, ExportOptions{Format: layout}); err != nil {
				t.Fatal(err)
			}
			got, err := (Method{}).Detect(dir)
			if err != nil || got != layout {
				t.Fatalf("detect %s: %q, %v", layout, got, err)
			}
			back, err := LoadDraft(dir, layout)
			if err != nil {
				t.Fatal(err)
			}
			if back.Geometry != g || back.Heads.Shape != sh || !slices.Equal(back.LayerIDs, ids) || back.TargetLayers != 4 || back.NumAnchors != d.NumAnchors {
				t.Fatalf("%s %+v: loaded geometry %+v heads %+v ids %v", layout, sh, back.Geometry, back.Heads.Shape, back.LayerIDs)
			}
			if !slices.Equal(back.Params.All, d.Params.All) || !slices.Equal(back.Heads.All, d.Heads.All) ||
				!slices.Equal(back.Embed, d.Embed) || !slices.Equal(back.LMHead, d.LMHead) {
				t.Fatalf("%s %+v: weights differ after the round trip", layout, sh)
			}
			cfg := readJSON(t, filepath.Join(dir, drafters.ConfigFile))
			switch layout {
			case FormatDeepSpec:
				if !reflectIDs(cfg["target_layer_ids"], []int{0, 3}) || cfg["architectures"].([]any)[0] != "Qwen3DSparkModel" || cfg["tie_word_embeddings"] != false {
					t.Errorf("deepspec config: target_layer_ids %v, architectures %v", cfg["target_layer_ids"], cfg["architectures"])
				}
				for _, k := range []string{"num_target_layers", "block_size", "mask_token_id", "num_anchors", "markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov", "layer_types"} {
					if _, ok := cfg[k]; !ok {
						t.Errorf("deepspec config lacks %s", k)
					}
				}
			case FormatSpeculators:
				if !reflectIDs(cfg["aux_hidden_state_layer_ids"], ids) || cfg["sample_from_anchor"] != true || cfg["speculators_model_type"] != "dspark" ||
					cfg["sliding_window_non_causal"] != true {
					t.Errorf("speculators config: aux %v, sample_from_anchor %v", cfg["aux_hidden_state_layer_ids"], cfg["sample_from_anchor"])
				}
			}
		}
	}
}

func reflectIDs(v any, want []int) bool {
	l, ok := v.([]any)
	if !ok || len(l) != len(want) {
		return false
	}
	for i, x := range l {
		if f, ok := x.(float64); !ok || int(f) != want[i] {
			return false
		}
	}
	return true
}

// The loader refuses what it would run wrongly: DFlash's unshifted block
// spelled as a speculators dspark config, another Markov head type, a
// missing or extra tensor, ids out of the target's range.
func TestLoadRefuses(t *testing.T) {
	g := tinyGeometry()
	d := randomDraft(t, g, HeadShape{Rank: 3, Confidence: true, WithMarkov: true}, []int{1, 4}, 4, 5)
	edit := func(layout string, f func(cfg map[string]any)) string {
		dir := filepath.Join(t.TempDir(), layout)
		if err := Export(dir, d, ExportOptions{Format: layout}); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, drafters.ConfigFile)
		cfg := readJSON(t, path)
		f(cfg)
		b, _ := json.Marshal(cfg)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for name, c := range map[string]struct {
		layout string
		f      func(map[string]any)
		want   string
	}{
		"unshifted":      {FormatSpeculators, func(c map[string]any) { c["sample_from_anchor"] = false }, "sample_from_anchor"},
		"gated":          {FormatDeepSpec, func(c map[string]any) { c["markov_head_type"] = "gated" }, "markov_head_type"},
		"no rank":        {FormatDeepSpec, func(c map[string]any) { delete(c, "markov_rank") }, "markov_rank"},
		"wrong rank":     {FormatDeepSpec, func(c map[string]any) { c["markov_rank"] = 4 }, "markov_head.markov_w1.weight"},
		"no confidence":  {FormatDeepSpec, func(c map[string]any) { c["enable_confidence_head"] = false }, "confidence_head"},
		"id past target": {FormatDeepSpec, func(c map[string]any) { c["target_layer_ids"] = []int{0, 4} }, "target_layer_ids"},
		"sliding": {FormatSpeculators, func(c map[string]any) {
			c["transformer_layer_config"].(map[string]any)["layer_types"] = []string{"full_attention", "sliding_attention"}
		}, "sliding_attention"},
	} {
		dir := edit(c.layout, c.f)
		if _, err := LoadDraft(dir, c.layout); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.want)
		}
	}
}
