package eval

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// The tests below take real exports of drafters for stories260k, written by
// the trainers' Export functions, edit them the way a broken pipeline or a
// hand edit would, and check that eval refuses them, naming what is wrong.

// medusaExport exports random Medusa heads of the given shape for m into a
// new folder (vllm/, medusa/ and drafter.json) and returns it.
func medusaExport(t *testing.T, m *model.Model, heads, layers int, dt safetensors.DType) string {
	t.Helper()
	g := dmedusa.Geometry{Hidden: m.HiddenSize(), Vocab: m.VocabSize(), Heads: heads, Layers: layers}
	h, err := dmedusa.NewHeads(g, m.LMHead.Float32(), false)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(uint64(heads), uint64(layers)))
	for hd := range heads {
		for l := range layers {
			for i := range h.W[hd][l] {
				h.W[hd][l][i] = float32(r.NormFloat64() * 0.1)
			}
		}
	}
	dir := t.TempDir()
	if err := dmedusa.Export(dir, h, dmedusa.ExportInfo{TargetFingerprint: "fp", DType: dt}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// eagleExport exports a random EAGLE-3 draft for m into dir/eagle3 in the
// given layout with the given feature layers (nil: the defaults) and writes
// the drafter.json train writes beside it; it returns the export folder.
func eagleExport(t *testing.T, m *model.Model, dir, format string, layers []int) string {
	t.Helper()
	g, p, voc := randomEagleParams(t, m, 100, 3)
	exp := filepath.Join(dir, "eagle3")
	opt := deagle3.ExportOptions{Format: format, LayerIDs: layers, DefaultLayers: layers == nil}
	if err := deagle3.Export(exp, g, p, voc, opt); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(dir, "drafter.json"), map[string]any{
		"method": "eagle3", "format": format, "hidden_size": g.Hidden, "vocab_size": g.Vocab, "draft_vocab_size": g.DraftVocab,
		"feature_layers": layers, "default_feature_layers": layers == nil, "target_fingerprint": "fp",
	})
	return exp
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editTensors rewrites the safetensors file path through edit, which gets
// every tensor with its bytes.
func editTensors(t *testing.T, path string, edit func([]safetensors.Tensor) []safetensors.Tensor) {
	t.Helper()
	s, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, name := range s.Names() {
		raw, info, err := s.Raw(name)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), raw...)})
	}
	s.Close()
	if err := safetensors.WriteFile(path, edit(ts), map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	handEdited(t, path)
}

// setFloats overwrites elements of the float tensor name (all when idx is
// empty) with v, encoded in the tensor's dtype.
func setFloats(t *testing.T, path, name string, v float32, idx ...int) {
	t.Helper()
	found := false
	editTensors(t, path, func(ts []safetensors.Tensor) []safetensors.Tensor {
		for i := range ts {
			if ts[i].Name != name {
				continue
			}
			found = true
			n := 1
			for _, d := range ts[i].Shape {
				n *= d
			}
			all := idx
			if len(all) == 0 {
				all = make([]int, n)
				for j := range all {
					all[j] = j
				}
			}
			vals := make([]float32, n)
			size, _ := ts[i].DType.Size()
			switch ts[i].DType {
			case safetensors.F32:
				safetensors.DecodeF32(vals, ts[i].Data)
			case safetensors.BF16:
				safetensors.DecodeBF16(vals, ts[i].Data)
			case safetensors.F16:
				safetensors.DecodeF16(vals, ts[i].Data)
			}
			for _, j := range all {
				vals[j] = v
			}
			nt, err := safetensors.FloatTensor(name, ts[i].DType, ts[i].Shape, vals)
			if err != nil || len(nt.Data) != n*size {
				t.Fatal(err)
			}
			ts[i] = nt
		}
		return ts
	})
	if !found {
		t.Fatalf("%s has no tensor %q", path, name)
	}
}

// replaceTensor replaces the tensor of nt's name with nt.
func replaceTensor(t *testing.T, path string, nt safetensors.Tensor) {
	t.Helper()
	editTensors(t, path, func(ts []safetensors.Tensor) []safetensors.Tensor {
		for i := range ts {
			if ts[i].Name == nt.Name {
				ts[i] = nt
			}
		}
		return ts
	})
}

// dropTensors removes the tensors for which drop is true.
func dropTensors(t *testing.T, path string, drop func(name string) bool) {
	t.Helper()
	editTensors(t, path, func(ts []safetensors.Tensor) []safetensors.Tensor {
		return slices.DeleteFunc(ts, func(x safetensors.Tensor) bool { return drop(x.Name) })
	})
}

// loadErr detects and loads the drafter in dir for m and returns the error,
// failing the test when there is none.
func loadErr(t *testing.T, m *model.Model, dir string) error {
	t.Helper()
	info, err := Detect(dir)
	if err != nil {
		return err
	}
	d, err := LoadDrafter(info, m)
	if err == nil {
		t.Fatalf("%s loaded (%+v); want an error", dir, d.Info)
	}
	return err
}

// setConfig returns an edit that sets key in the export's config.json.
func setConfig(key string, v any) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		editJSON(t, filepath.Join(dir, "config.json"), func(c map[string]any) { c[key] = v })
	}
}

// addTensor returns an edit that adds a small F32 tensor name to the
// export's weights file.
func addTensor(file, name string) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		editTensors(t, filepath.Join(dir, file), func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(ts, safetensors.F32Tensor(name, []int{2}, []float32{1, 2}))
		})
	}
}

// TestMedusaConfigMatchesWeights: a config that counts fewer heads or blocks
// than the weights hold, or more, and tensors the config has no use for, are
// refused in both layouts, naming the tensor, the file and the config field.
// (Before, the heads and blocks beyond the config's counts were silently
// dropped and extra tensors ignored.)
func TestMedusaConfigMatchesWeights(t *testing.T) {
	m := loadTarget(t)
	cases := []struct {
		name   string
		layout string
		edit   func(t *testing.T, dir string) // dir is the layout's folder
		want   []string
	}{
		{"fewer heads", "vllm", setConfig("num_heads", 4), []string{`"blocks.4.layers.0.bias"`, "model.safetensors", "config.json", "num_heads is 4: heads 0 to 3"}},
		{"fewer blocks", "vllm", setConfig("num_hidden_layers", 2), []string{`"blocks.0.layers.2.bias"`, "num_hidden_layers is 2: blocks 0 to 1 in each head"}},
		{"more heads", "vllm", setConfig("num_heads", 6), []string{`no tensor "blocks.5.layers.0.weight"`, "num_heads 6"}},
		{"bias without medusa_fc_bias", "vllm", setConfig("medusa_fc_bias", false), []string{`"blocks.0.layers.0.bias"`, "medusa_fc_bias is false"}},
		{"unknown tensor", "vllm", addTensor("model.safetensors", "medusa_heads.extra.weight"), []string{`"medusa_heads.extra.weight"`, "not a tensor of vLLM's Medusa layout"}},
		{"missing block", "vllm", func(t *testing.T, dir string) {
			dropTensors(t, filepath.Join(dir, "model.safetensors"), func(n string) bool { return n == "blocks.2.layers.1.weight" })
		}, []string{`no tensor "blocks.2.layers.1.weight"`, "num_heads 5, num_hidden_layers 3"}},
		{"block of another shape", "vllm", func(t *testing.T, dir string) {
			replaceTensor(t, filepath.Join(dir, "model.safetensors"), safetensors.F32Tensor("blocks.1.layers.0.bias", []int{32}, make([]float32, 32)))
		}, []string{`"blocks.1.layers.0.bias" has shape [32], want [64]`}},
		{"integer weights", "vllm", func(t *testing.T, dir string) {
			replaceTensor(t, filepath.Join(dir, "model.safetensors"), safetensors.I32Tensor("blocks.1.layers.0.bias", []int{64}, make([]int32, 64)))
		}, []string{`"blocks.1.layers.0.bias" has dtype I32`}},
		{"fewer heads", "medusa", setConfig("medusa_num_heads", 4), []string{`"4.0.linear.bias"`, "medusa_lm_head.safetensors", "medusa_num_heads is 4: heads 0 to 3"}},
		{"fewer blocks", "medusa", setConfig("medusa_num_layers", 2), []string{`"0.2.linear.bias"`, "medusa_num_layers is 2: blocks 0 to 1 in each head"}},
		{"more blocks", "medusa", setConfig("medusa_num_layers", 4), []string{`"0.3.weight"`, "medusa_num_layers is 4, so head 0's lm_head is 0.4.weight"}},
		{"unknown tensor", "medusa", addTensor("medusa_lm_head.safetensors", "lm_head.weight"), []string{`"lm_head.weight"`, "not a tensor of FasterDecoding's Medusa layout"}},
		{"hidden_size against the weights", "medusa", setConfig("hidden_size", 32), []string{"says hidden_size 32", `"0.3.weight"`, "[512, 64]"}},
	}
	for _, c := range cases {
		t.Run(c.layout+"/"+c.name, func(t *testing.T) {
			root := medusaExport(t, m, 5, 3, safetensors.F32)
			dir := filepath.Join(root, c.layout)
			if _, err := detectAndLoad(t, m, dir); err != nil {
				t.Fatalf("the unedited export: %v", err)
			}
			c.edit(t, dir)
			testutil.WantErr(t, loadErr(t, m, dir), append([]string{dir}, c.want...)...)
		})
	}
}

// detectAndLoad detects and loads the drafter in dir.
func detectAndLoad(t *testing.T, m *model.Model, dir string) (*Drafter, error) {
	t.Helper()
	info, err := Detect(dir)
	if err != nil {
		return nil, err
	}
	return LoadDrafter(info, m)
}

// TestNonFiniteDrafterRefused: an all-NaN Medusa head (which before evaluated
// with exit 0 and top-1 0.000), an infinity in a BF16 export and an infinity in
// an EAGLE-3 weight are refused at load, naming the file, the tensor and the
// first bad element.
func TestNonFiniteDrafterRefused(t *testing.T) {
	m := loadTarget(t)
	inf := float32(math.Inf(1))

	root := medusaExport(t, m, 4, 1, safetensors.F32)
	file := filepath.Join(root, "vllm", "model.safetensors")
	setFloats(t, file, "lm_heads.2.weight", float32(math.NaN()))
	testutil.WantErr(t, loadErr(t, m, root), file, `"lm_heads.2.weight"`, "NaN", "(F32 [512, 64]) holds NaN at element 0 (index [0, 0])")

	root = medusaExport(t, m, 4, 2, safetensors.BF16)
	file = filepath.Join(root, "medusa", "medusa_lm_head.safetensors")
	setFloats(t, file, "3.1.linear.weight", -inf, 200)
	testutil.WantErr(t, loadErr(t, m, filepath.Join(root, "medusa")), file, `"3.1.linear.weight"`, "-Inf", "(BF16 [64, 64]) holds -Inf at element 200 (index [3, 8])")

	for _, format := range []string{deagle3.FormatNative, deagle3.FormatSpeculators} {
		exp := eagleExport(t, m, t.TempDir(), format, []int{1, 3, 5})
		file = filepath.Join(exp, "model.safetensors")
		name := "midlayer.mlp.down_proj.weight"
		if format == deagle3.FormatSpeculators {
			name = "layers.0.mlp.down_proj.weight"
		}
		setFloats(t, file, name, inf, 1000, 5000)
		testutil.WantErr(t, loadErr(t, m, exp), file, `"`+name+`"`, "+Inf", "element 1000")
	}
}

// TestEagleLayerIDsInExport: feature layers out of order or repeated in an
// export are refused (the engines gather them in ascending order), as are
// layers outside the target and a native config whose two keys name
// different layers; a native config that names its layers only in
// eagle_config (SpecForge's convention, HF index - 1) is read.
func TestEagleLayerIDsInExport(t *testing.T) {
	m := loadTarget(t)
	set := func(cfg map[string]any, top, inner []int) {
		delete(cfg, "eagle_aux_hidden_state_layer_ids")
		delete(cfg, "eagle_config")
		if top != nil {
			cfg["eagle_aux_hidden_state_layer_ids"] = top
		}
		if inner != nil {
			cfg["eagle_config"] = map[string]any{"eagle_aux_hidden_state_layer_ids": inner}
		}
	}
	cases := []struct {
		format     string
		top, inner []int
		want       []string
	}{
		{deagle3.FormatNative, []int{5, 3, 1}, []int{4, 2, 0}, []string{"eagle_aux_hidden_state_layer_ids [5 3 1]", "not strictly increasing", "ascending layer order"}},
		{deagle3.FormatNative, []int{3, 3, 3}, []int{2, 2, 2}, []string{"[3 3 3]", "not strictly increasing"}},
		{deagle3.FormatNative, nil, []int{4, 2, 0}, []string{"eagle_config.eagle_aux_hidden_state_layer_ids [4 2 0]", "not strictly increasing"}},
		{deagle3.FormatSpeculators, []int{5, 3, 1}, nil, []string{"[5 3 1]", "not strictly increasing"}},
		{deagle3.FormatSpeculators, []int{3, 3, 3}, nil, []string{"[3 3 3]", "not strictly increasing"}},
		{deagle3.FormatNative, []int{1, 3, 4}, []int{0, 2, 4}, []string{"eagle_config.eagle_aux_hidden_state_layer_ids [0 2 4]", "hidden_states [1 3 5]", "eagle_aux_hidden_state_layer_ids [1 3 4]", "name different layers"}},
		{deagle3.FormatNative, []int{0, 2, 4}, []int{-1, 1, 3}, []string{"embedding output"}},
		{deagle3.FormatSpeculators, []int{1, 3, 6}, nil, []string{"feature layers [1 3 6]: layer 6 is outside the target's hidden_states indices 1 to 5"}},
		{deagle3.FormatSpeculators, []int{1, 3}, nil, []string{"[1 3]: 2 layers; want 3"}},
	}
	for _, c := range cases {
		root := t.TempDir()
		exp := eagleExport(t, m, root, c.format, []int{1, 3, 5})
		if _, err := detectAndLoad(t, m, root); err != nil {
			t.Fatalf("the unedited export: %v", err)
		}
		os.Remove(filepath.Join(root, "drafter.json")) // the layers are checked without one
		editJSON(t, filepath.Join(exp, "config.json"), func(cfg map[string]any) { set(cfg, c.top, c.inner) })
		err := loadErr(t, m, root)
		testutil.WantErr(t, err, append([]string{exp}, c.want...)...)
	}

	// Only eagle_config: its ids are layer outputs, read as HF index + 1.
	root := t.TempDir()
	exp := eagleExport(t, m, root, deagle3.FormatNative, []int{1, 3, 5})
	editJSON(t, filepath.Join(exp, "config.json"), func(cfg map[string]any) { set(cfg, nil, []int{0, 1, 3}) })
	os.Remove(filepath.Join(root, "drafter.json"))
	d, err := detectAndLoad(t, m, root)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(eagleDraft(d).LayerIDs, []int{1, 2, 4}) {
		t.Fatalf("eagle_config [0 1 3] read as layers %v, want [1 2 4]", eagleDraft(d).LayerIDs)
	}
}

// TestEagleConfigMatchesWeights: tensors an EAGLE-3 config has no use for
// (an embedding, the other layout's keys) and a multi-layer config are
// refused, naming the tensor and the file.
func TestEagleConfigMatchesWeights(t *testing.T) {
	m := loadTarget(t)
	exp := eagleExport(t, m, t.TempDir(), deagle3.FormatNative, nil)
	file := filepath.Join(exp, "model.safetensors")
	editTensors(t, file, func(ts []safetensors.Tensor) []safetensors.Tensor {
		return append(ts, safetensors.F32Tensor("embed_tokens.weight", []int{512, 64}, m.Embed.Float32()))
	})
	testutil.WantErr(t, loadErr(t, m, exp), file, `"embed_tokens.weight"`, "target's embedding")

	exp = eagleExport(t, m, t.TempDir(), deagle3.FormatSpeculators, nil)
	file = filepath.Join(exp, "model.safetensors")
	editTensors(t, file, func(ts []safetensors.Tensor) []safetensors.Tensor {
		return append(ts, safetensors.F32Tensor("midlayer.extra.weight", []int{2}, []float32{1, 2}))
	})
	testutil.WantErr(t, loadErr(t, m, exp), file, `"midlayer.extra.weight"`, `start with "layers.0."`)

	exp = eagleExport(t, m, t.TempDir(), deagle3.FormatNative, nil)
	editJSON(t, filepath.Join(exp, "config.json"), func(cfg map[string]any) { cfg["num_hidden_layers"] = 2 })
	testutil.WantErr(t, loadErr(t, m, exp), "num_hidden_layers is 2", "one decoder layer")

	exp = eagleExport(t, m, t.TempDir(), deagle3.FormatNative, nil)
	dropTensors(t, filepath.Join(exp, "model.safetensors"), func(n string) bool { return n == "midlayer.self_attn.o_proj.weight" })
	testutil.WantErr(t, loadErr(t, m, exp), `no tensor "midlayer.self_attn.o_proj.weight"`)
}

// TestProvenanceMatchesExport: an export beside a drafter.json that describes
// another drafter (another run's export copied in, or a hand-edited config)
// is refused, naming drafter.json, the export file and the field.
func TestProvenanceMatchesExport(t *testing.T) {
	m := loadTarget(t)

	// Another run's Medusa export (3 heads) over a 5-head run's folder.
	root := medusaExport(t, m, 5, 2, safetensors.F32)
	other := medusaExport(t, m, 3, 2, safetensors.F32)
	for _, f := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(other, "vllm", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "vllm", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// (With its SHA256SUMS the copy reads as damage: TestDamagedExportRefused.)
	handEdited(t, filepath.Join(root, "drafter.json"))
	testutil.WantErr(t, loadErr(t, m, root), filepath.Join(root, "drafter.json"), "records num_heads 5",
		filepath.Join(root, "vllm", "config.json"), "has 3")

	for _, c := range []struct {
		key  string
		val  any
		want string
	}{
		{"num_layers", 3, "records num_layers 3"},
		{"dtype", "BF16", "records dtype BF16"},
		{"shared_lm_head", true, "records shared_lm_head true"},
		{"hidden_size", 128, "records hidden_size 128"},
		{"method", "eagle3", "records method eagle3"},
	} {
		root := medusaExport(t, m, 2, 2, safetensors.F32)
		editJSON(t, filepath.Join(root, "drafter.json"), func(p map[string]any) { p[c.key] = c.val })
		testutil.WantErr(t, loadErr(t, m, root), filepath.Join(root, "drafter.json"), c.want, "describe different drafters")
	}

	for _, c := range []struct {
		key  string
		val  any
		want string
	}{
		{"feature_layers", []int{1, 2, 5}, "records feature_layers [1 2 5]"},
		{"default_feature_layers", true, "records feature_layers none (the engines' default feature layers), but the export"},
		{"draft_vocab_size", 256, "records draft_vocab_size 256"},
		{"format", "speculators", "records format speculators"},
		{"method", "medusa", "records method medusa, but the export %s has eagle3"},
	} {
		root := t.TempDir()
		exp := eagleExport(t, m, root, deagle3.FormatNative, []int{1, 3, 5})
		editJSON(t, filepath.Join(root, "drafter.json"), func(p map[string]any) { p[c.key] = c.val })
		file := filepath.Join(exp, "config.json")
		if c.key == "method" {
			file = exp
		}
		testutil.WantErr(t, loadErr(t, m, root), filepath.Join(root, "drafter.json"), strings.ReplaceAll(c.want, "%s", file), "but the export "+file+" has")
	}
	// An export with the engines' default layers under a drafter.json that
	// records explicit ones.
	root = t.TempDir()
	eagleExport(t, m, root, deagle3.FormatSpeculators, nil)
	editJSON(t, filepath.Join(root, "drafter.json"), func(p map[string]any) {
		p["feature_layers"], p["default_feature_layers"] = []int{1, 3, 5}, false
	})
	testutil.WantErr(t, loadErr(t, m, root), "records feature_layers [1 3 5]", "has none (the engines' default feature layers)")
}

// TestDrafterFitsTarget: exports for a target of another vocabulary or hidden
// size are refused with both sizes named.
func TestDrafterFitsTarget(t *testing.T) {
	m := loadTarget(t)
	g := dmedusa.Geometry{Hidden: m.HiddenSize(), Vocab: 600, Heads: 2, Layers: 1}
	h, err := dmedusa.NewHeads(g, make([]float32, 600*m.HiddenSize()), false)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := dmedusa.Export(root, h, dmedusa.ExportInfo{}); err != nil {
		t.Fatal(err)
	}
	testutil.WantErr(t, loadErr(t, m, root), "do not fit the target", "vocabulary of 600", "vocab_size 512", filepath.Join(root, "vllm"))

	exp := eagleExport(t, m, t.TempDir(), deagle3.FormatNative, nil)
	editJSON(t, filepath.Join(exp, "config.json"), func(cfg map[string]any) { cfg["vocab_size"] = 1024 })
	testutil.WantErr(t, loadErr(t, m, exp), filepath.Join(exp, "config.json"), "hidden_size 64 and vocab_size 1024", "another model")
}
