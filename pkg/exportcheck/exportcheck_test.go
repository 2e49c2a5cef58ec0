package exportcheck

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// The fixtures are made by drafter's own exporters (the tests' only use of
// them: the rules under test are this package's), then broken by editing
// config.json or the weights the way each known silent break looks.

// tinyEAGLE3 is a draft of hidden size 8 over a 16-token vocabulary, 10 of
// them in the draft vocabulary.
func tinyEAGLE3() deagle3.Geometry {
	return deagle3.Geometry{Hidden: 8, Heads: 2, KVHeads: 1, HeadDim: 4, Intermediate: 12, RMSNormEps: 1e-5,
		RopeTheta: 10000, MaxPositions: 64, Vocab: 16, DraftVocab: 10}
}

// exportEAGLE3 exports a tiny draft in format into dir/eagle3 (layers nil:
// the engines' defaults) and returns the export folder.
func exportEAGLE3(t *testing.T, dir, format string, layers []int) string {
	t.Helper()
	g := tinyEAGLE3()
	counts := make([]int64, g.Vocab)
	for i := range counts {
		counts[i] = int64(i % 5)
	}
	voc, err := deagle3.BuildVocab(counts, g.DraftVocab)
	if err != nil {
		t.Fatal(err)
	}
	p := deagle3.NewParams(g)
	for _, ts := range p.Tensors(g) {
		for i := range ts.Data {
			ts.Data[i] = float32(i%7)/7 - 0.5
		}
	}
	out := filepath.Join(dir, "eagle3")
	opt := deagle3.ExportOptions{Format: format, LayerIDs: layers, DefaultLayers: layers == nil, TargetName: "tiny"}
	if err := deagle3.Export(out, g, p, voc, opt); err != nil {
		t.Fatal(err)
	}
	return out
}

// editConfig rewrites dir/config.json through edit.
func editConfig(t *testing.T, dir string, edit func(m map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, configFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.MarshalIndent(m, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editWeights rewrites a safetensors file: edit gets its tensors by name
// and returns the tensors to write.
func editWeights(t *testing.T, path string, edit func(ts map[string]safetensors.Tensor)) {
	t.Helper()
	set, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := map[string]safetensors.Tensor{}
	for _, n := range set.Names() {
		raw, info, err := set.Raw(n)
		if err != nil {
			t.Fatal(err)
		}
		ts[n] = safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: slices.Clone(raw)}
	}
	set.Close()
	edit(ts)
	var list []safetensors.Tensor
	for n, x := range ts {
		x.Name = n
		list = append(list, x)
	}
	if err := safetensors.WriteFile(path, list, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
}

// ones is an F32 tensor of ones.
func ones(n int) safetensors.Tensor {
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return safetensors.F32Tensor("", []int{n}, v)
}

// check runs Check for engines and fails the test on an error return.
func check(t *testing.T, dir string, engines ...Engine) *Report {
	t.Helper()
	r, err := Check(dir, Options{Engines: engines})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// passes fails the test when r has an Error.
func passes(t *testing.T, r *Report) {
	t.Helper()
	if r.Failed() {
		t.Fatalf("errors:\n%s", strings.Join(r.Lines(), "\n"))
	}
}

// caught fails the test unless r has an Error for engine e on key whose
// message contains every part of msg.
func caught(t *testing.T, r *Report, e Engine, key string, msg ...string) {
	t.Helper()
	for _, f := range r.Findings {
		if f.Level != Error || f.Key != key || !slices.Contains(f.Engines, e) {
			continue
		}
		ok := true
		for _, m := range msg {
			ok = ok && strings.Contains(f.Msg, m)
		}
		if ok {
			return
		}
	}
	t.Fatalf("no error for %s on %s mentioning %q; findings:\n%s", e, key, msg, strings.Join(r.Lines(), "\n"))
}

// writeEAGLE31 turns the native export in dir into an EAGLE-3.1 one with
// the switches given, written as the engines read them (all four top-level
// booleans, and TensorRT-LLM's eagle_config spellings), with the weights
// they imply (unit norms).
func writeEAGLE31(t *testing.T, dir string, fcNorm, normBeforeFC, normOutput bool) {
	t.Helper()
	editConfig(t, dir, func(m map[string]any) {
		m["fc_norm"], m["norm_before_fc"], m["norm_output"], m["norm_before_residual"] = fcNorm, normBeforeFC, normOutput, false
		ec, _ := m["eagle_config"].(map[string]any)
		if ec == nil {
			ec = map[string]any{}
		}
		ec["norm_before_fc"], ec["return_hidden_post_norm"] = normBeforeFC, normOutput
		m["eagle_config"] = ec
	})
	editWeights(t, filepath.Join(dir, "model.safetensors"), func(ts map[string]safetensors.Tensor) {
		if fcNorm {
			for i := range 3 {
				ts["fc_norm."+string(rune('0'+i))+".weight"] = ones(8)
			}
		}
		if normBeforeFC {
			ts["input_norm.weight"] = ones(24)
		}
	})
}

func TestOurEAGLE3ExportsPass(t *testing.T) {
	for _, format := range []string{deagle3.FormatNative, deagle3.FormatSpeculators} {
		for _, layers := range [][]int{nil, {2, 4, 9}} {
			dir := exportEAGLE3(t, t.TempDir(), format, layers)
			r := check(t, dir)
			passes(t, r)
			if len(r.Exports) != 1 || r.Exports[0].Layout != format {
				t.Fatalf("exports %+v, want one %s export", r.Exports, format)
			}
			if format == deagle3.FormatSpeculators && !slices.Equal(r.Exports[0].Engines, []Engine{VLLM}) {
				t.Fatalf("speculators export checked for %v, want vllm only", r.Exports[0].Engines)
			}
		}
	}
}

func TestEAGLE31FixturesPass(t *testing.T) {
	for _, sw := range [][3]bool{{true, false, false}, {true, false, true}, {false, true, false}, {false, true, true}, {false, false, true}} {
		dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, []int{2, 4, 9})
		writeEAGLE31(t, dir, sw[0], sw[1], sw[2])
		r := check(t, dir)
		passes(t, r)
		// Old engine versions are named in a note.
		if !slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Level == Note && strings.Contains(f.Msg, "predate") }) {
			t.Fatalf("%v: no note on engines that predate EAGLE-3.1:\n%s", sw, strings.Join(r.Lines(), "\n"))
		}
	}
}

func TestFCNormWeightMissing(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, []int{2, 4, 9})
	writeEAGLE31(t, dir, true, false, false)
	editWeights(t, filepath.Join(dir, "model.safetensors"), func(ts map[string]safetensors.Tensor) { delete(ts, "fc_norm.1.weight") })
	r := check(t, dir)
	for _, e := range Engines() {
		caught(t, r, e, "fc_norm.1.weight", "missing", "fc_norm true")
	}
}

func TestFCNormWeightsWithoutFlag(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, []int{2, 4, 9})
	writeEAGLE31(t, dir, true, false, false)
	editConfig(t, dir, func(m map[string]any) { m["fc_norm"] = false })
	r := check(t, dir)
	caught(t, r, VLLM, "fc_norm.0.weight", "refuses")
	caught(t, r, SGLang, "fc_norm.0.weight", "without a word")
	caught(t, r, TRTLLM, "fc_norm.0.weight")
	// Without drafter.json or the key, the weights say fc_norm: the
	// engines' false is a mismatch only once something records true; here
	// the config itself says false, so the weights are the finding.
}

func TestNormBeforeFCDropped(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, []int{2, 4, 9})
	writeEAGLE31(t, dir, false, true, false)
	editConfig(t, dir, func(m map[string]any) {
		delete(m, "norm_before_fc")
		delete(m["eagle_config"].(map[string]any), "norm_before_fc")
	})
	r := check(t, dir)
	caught(t, r, VLLM, "input_norm.weight", "skips it without a word")
	caught(t, r, SGLang, "input_norm.weight", "without a word")
	for _, e := range Engines() {
		caught(t, r, e, "norm_before_fc", "the engine runs norm_before_fc false, but the export describes true")
	}
}

func TestNormBeforeFCOnlyTopLevelMissesTRTLLM(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, []int{2, 4, 9})
	writeEAGLE31(t, dir, false, true, false)
	editConfig(t, dir, func(m map[string]any) { delete(m["eagle_config"].(map[string]any), "norm_before_fc") })
	r := check(t, dir)
	caught(t, r, TRTLLM, "norm_before_fc", "eagle_config only")
	if r := check(t, dir, VLLM); r.Failed() {
		t.Fatalf("vLLM reads the top-level key:\n%s", strings.Join(r.Lines(), "\n"))
	}
}

func TestBothNormsRefused(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, []int{2, 4, 9})
	writeEAGLE31(t, dir, true, true, false)
	caught(t, check(t, dir), VLLM, "fc_norm+norm_before_fc", "exclusive")
}

func TestLayerIDsOffByOneBetweenKeys(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, []int{2, 4, 9})
	editConfig(t, dir, func(m map[string]any) {
		// The "output of layer k" spelling written as if it were the HF index.
		m["eagle_config"].(map[string]any)["eagle_aux_hidden_state_layer_ids"] = []int{2, 4, 9}
	})
	r := check(t, dir)
	caught(t, r, VLLM, "eagle_aux_hidden_state_layer_ids", "name different layers")
	caught(t, r, SGLang, "eagle_config.eagle_aux_hidden_state_layer_ids", "captures hidden_states [3 5 10]", "describes [2 4 9]")
}

func TestLayerIDsOneKeyOnly(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, []int{2, 4, 9})
	editConfig(t, dir, func(m map[string]any) { delete(m, "eagle_config") })
	r := check(t, dir)
	// SGLang reads only eagle_config's ids and falls back to its default.
	caught(t, r, SGLang, "eagle_config.eagle_aux_hidden_state_layer_ids", "absent", "default")
	// With the target's layer count recorded, the default is known: for
	// L=12 it is (2, 6, 9), not the export's (2, 4, 9).
	prov := map[string]any{"method": "eagle3", "target_num_hidden_layers": 12, "feature_layers": []int{2, 4, 9}}
	b, _ := json.Marshal(prov)
	if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "drafter.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	caught(t, check(t, dir), SGLang, "eagle_config.eagle_aux_hidden_state_layer_ids", "[2 6 9]")
}

func TestLayerIDsOutOfRange(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, []int{2, 4, 9})
	b, _ := json.Marshal(map[string]any{"method": "eagle3", "target_num_hidden_layers": 8})
	if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "drafter.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	caught(t, check(t, dir), VLLM, "eagle_aux_hidden_state_layer_ids", "outside the target's 8 layers")
}

func TestD2THoldsTargetIDs(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, nil)
	editWeights(t, filepath.Join(dir, "model.safetensors"), func(ts map[string]safetensors.Tensor) {
		set := ts["d2t"]
		off := make([]int64, 10)
		for i := range off {
			off[i] = int64(set.Data[8*i]) | int64(set.Data[8*i+1])<<8
		}
		ids := make([]int64, len(off))
		for i := range off {
			ids[i] = int64(i) + off[i]
		}
		ts["d2t"] = safetensors.I64Tensor("", []int{10}, ids)
	})
	r := check(t, dir)
	for _, e := range Engines() {
		caught(t, r, e, "d2t", "offsets", "holds the target ids themselves")
	}
}

func TestT2DDisagreesWithD2T(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, nil)
	editWeights(t, filepath.Join(dir, "model.safetensors"), func(ts map[string]safetensors.Tensor) {
		t2d := make([]bool, 16)
		for i := range 10 {
			t2d[15-i] = true
		}
		ts["t2d"] = safetensors.BoolTensor("", []int{16}, t2d)
	})
	caught(t, check(t, dir), VLLM, "t2d", "different vocabularies")
}

func TestSpeculatorsNormBeforeResidualAbsent(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatSpeculators, nil)
	editConfig(t, dir, func(m map[string]any) { delete(m, "norm_before_residual") })
	caught(t, check(t, dir), VLLM, "norm_before_residual", "assumes TRUE")
}

func TestSpeculatorsLayoutNotForSGLang(t *testing.T) {
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatSpeculators, nil)
	r := check(t, dir, SGLang)
	if !r.Failed() {
		t.Fatal("SGLang asked for on a speculators export: no error")
	}
}

func TestDrafterJSONSwitchNotInConfig(t *testing.T) {
	// drafter.json records a 3.1 draft with norm_output; the config lost the
	// key (and eagle_config's spelling): every engine runs pre-norm feedback.
	dir := exportEAGLE3(t, t.TempDir(), deagle3.FormatNative, []int{2, 4, 9})
	b, _ := json.Marshal(map[string]any{"method": "eagle3", "variant": "eagle3.1", "norm_output": true})
	if err := os.WriteFile(filepath.Join(filepath.Dir(dir), "drafter.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := check(t, dir)
	for _, e := range Engines() {
		caught(t, r, e, "norm_output", "runs norm_output false")
	}
}

// exportMedusa exports tiny heads (4 heads of 1 block, H 8, V 16) into dir.
func exportMedusa(t *testing.T, dir string) {
	t.Helper()
	g := dmedusa.Geometry{Hidden: 8, Vocab: 16, Heads: 4, Layers: 1}
	lm := make([]float32, 16*8)
	for i := range lm {
		lm[i] = float32(i%5) / 5
	}
	m, err := dmedusa.NewHeads(g, lm, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := dmedusa.Export(dir, m, dmedusa.ExportInfo{BaseModel: "tiny", TargetFingerprint: "x"}); err != nil {
		t.Fatal(err)
	}
}

func TestOurMedusaExportPasses(t *testing.T) {
	dir := t.TempDir()
	exportMedusa(t, dir)
	r := check(t, dir)
	passes(t, r)
	if len(r.Exports) != 2 {
		t.Fatalf("exports %+v, want vllm/ and medusa/", r.Exports)
	}
	// Each layout alone, for the engine that loads it.
	passes(t, check(t, filepath.Join(dir, "vllm"), VLLM))
	passes(t, check(t, filepath.Join(dir, "medusa"), TRTLLM))
	// An engine that loads neither layout, asked for by name.
	if !check(t, dir, SGLang).Failed() {
		t.Fatal("SGLang on a Medusa export: no error")
	}
}

func TestMedusaHeadCountDisagrees(t *testing.T) {
	dir := t.TempDir()
	exportMedusa(t, dir)
	editConfig(t, filepath.Join(dir, "vllm"), func(m map[string]any) { m["num_heads"] = 3 })
	editConfig(t, filepath.Join(dir, "medusa"), func(m map[string]any) { m["medusa_num_heads"] = 5 })
	r := check(t, dir)
	caught(t, r, VLLM, "blocks.3.layers.0.weight", "num_heads is 3", "drops it without a word")
	caught(t, r, TRTLLM, "4.0.linear.weight", "missing", "KeyError")
}

func TestMedusaVocabDisagrees(t *testing.T) {
	dir := t.TempDir()
	exportMedusa(t, dir)
	editConfig(t, filepath.Join(dir, "vllm"), func(m map[string]any) { m["vocab_size"], m["truncated_vocab_size"] = 32, 32 })
	editConfig(t, filepath.Join(dir, "medusa"), func(m map[string]any) { m["vocab_size"] = 32 })
	r := check(t, dir)
	caught(t, r, VLLM, "lm_heads.0.weight", "shape [16, 8]", "[32, 8]")
	caught(t, r, TRTLLM, "vocab_size", "32")
}

func TestMedusaBiasWithoutFlag(t *testing.T) {
	dir := t.TempDir()
	exportMedusa(t, dir)
	editConfig(t, filepath.Join(dir, "vllm"), func(m map[string]any) { delete(m, "medusa_fc_bias") })
	caught(t, check(t, dir), VLLM, "blocks.0.layers.0.bias", "medusa_fc_bias is false")
}

func TestNoExport(t *testing.T) {
	if _, err := Check(t.TempDir(), Options{}); !errors.Is(err, ErrNoExport) {
		t.Fatalf("err %v, want ErrNoExport", err)
	}
}

func TestFindingLine(t *testing.T) {
	f := Finding{Level: Error, Engines: []Engine{VLLM, SGLang}, File: "out/eagle3/config.json", Key: "fc_norm", Msg: "m"}
	if got, want := f.String(), "error: vllm,sglang: out/eagle3/config.json: fc_norm: m"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

func TestParseEngines(t *testing.T) {
	if es, err := ParseEngines("all"); err != nil || len(es) != 3 {
		t.Fatal(es, err)
	}
	if es, err := ParseEngines("trtllm"); err != nil || !slices.Equal(es, []Engine{TRTLLM}) {
		t.Fatal(es, err)
	}
	if _, err := ParseEngines("tgi"); err == nil {
		t.Fatal("tgi accepted")
	}
}
