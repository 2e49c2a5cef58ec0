package medusa

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// randomHeads returns heads of geometry g with random weights over a random
// target lm_head, which it returns too.
func randomHeads(t *testing.T, g Geometry, seed uint64) (*Heads, []float32) {
	r := rand.New(rand.NewPCG(seed, 5))
	target := make([]float32, g.Vocab*g.Hidden)
	for i := range target {
		target[i] = float32(0.5 * r.NormFloat64())
	}
	m, err := NewHeads(g, target, false)
	if err != nil {
		t.Fatal(err)
	}
	p := m.ParamData() // blocks and unshared lm_heads: heads differ from each other and from the target
	for i := range p {
		p[i] = float32(0.4 * r.NormFloat64())
	}
	return m, target
}

// TestExportRoundTrip writes both layouts, checks key names, shapes, dtypes and
// config fields against the engines' lists, and re-reads each layout from disk
// to reproduce the heads' logits exactly (float32 export).
func TestExportRoundTrip(t *testing.T) {
	for _, shared := range []bool{false, true} {
		g := Geometry{Hidden: 8, Vocab: 13, Heads: 3, Layers: 2, SharedLMHead: shared}
		m, target := randomHeads(t, g, 11)
		dir := t.TempDir()
		info := ExportInfo{BaseModel: "org/target", TargetFingerprint: "sha256:abc", DataManifests: map[string]string{"data/manifest.json": "sha256:def"},
			Args: map[string]any{"lr": 0.01}, Metrics: map[string]any{"step": 3, "top1": []float64{0.5, 0.25, 0.1}}}
		if err := Export(dir, m, info); err != nil {
			t.Fatal(err)
		}

		// vLLM keys and config.
		vs, err := safetensors.Open(filepath.Join(dir, "vllm", "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]int{}
		for h := 0; h < g.Heads; h++ {
			for l := 0; l < g.Layers; l++ {
				want[sprintf("blocks.%d.layers.%d.weight", h, l)] = []int{8, 8}
				want[sprintf("blocks.%d.layers.%d.bias", h, l)] = []int{8}
			}
			if !shared || h == 0 {
				want[sprintf("lm_heads.%d.weight", h)] = []int{13, 8}
			}
		}
		checkKeys(t, vs, want)
		vs.Close()
		vc := testutil.ReadJSON(t, filepath.Join(dir, "vllm", "config.json"))
		for k, v := range map[string]any{"model_type": "medusa", "architectures": []any{"MedusaModel"}, "hidden_size": 8.0, "vocab_size": 13.0,
			"num_heads": 3.0, "num_hidden_layers": 2.0, "medusa_fc_bias": true, "original_lm_head": shared, "truncated_vocab_size": 13.0} {
			if !reflect.DeepEqual(vc[k], v) {
				t.Errorf("vllm config %s = %v, want %v", k, vc[k], v)
			}
		}

		// FasterDecoding keys and config.
		fs, err := safetensors.Open(filepath.Join(dir, "medusa", "medusa_lm_head.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		want = map[string][]int{}
		for h := 0; h < g.Heads; h++ {
			for l := 0; l < g.Layers; l++ {
				want[sprintf("%d.%d.linear.weight", h, l)] = []int{8, 8}
				want[sprintf("%d.%d.linear.bias", h, l)] = []int{8}
			}
			want[sprintf("%d.%d.weight", h, g.Layers)] = []int{13, 8}
		}
		checkKeys(t, fs, want)
		if shared { // every head carries the target's lm_head
			got, _, err := fs.Float32("2.2.weight")
			if err != nil || !reflect.DeepEqual(got, target) {
				t.Errorf("shared head: FasterDecoding lm_head of head 2 is not the target's (%v)", err)
			}
		}
		fs.Close()
		fc := testutil.ReadJSON(t, filepath.Join(dir, "medusa", "config.json"))
		for k, v := range map[string]any{"medusa_num_heads": 3.0, "medusa_num_layers": 2.0, "base_model_name_or_path": "org/target"} {
			if !reflect.DeepEqual(fc[k], v) {
				t.Errorf("medusa config %s = %v, want %v", k, fc[k], v)
			}
		}
		pv := testutil.ReadJSON(t, filepath.Join(dir, "drafter.json"))
		if pv["method"] != "medusa" || pv["target_fingerprint"] != "sha256:abc" || pv["data_manifests"].(map[string]any)["data/manifest.json"] != "sha256:def" ||
			pv["args"].(map[string]any)["lr"] != 0.01 || pv["metrics"] == nil {
			t.Errorf("drafter.json incomplete: %v", pv)
		}

		// Logits through each re-read layout equal the originals bitwise.
		be := cpu.DefaultBackend()
		rows := 5
		x := make([]float32, rows*g.Hidden)
		xr := rand.New(rand.NewPCG(1, 1))
		for i := range x {
			x[i] = float32(xr.NormFloat64())
		}
		for _, sub := range []string{dir, filepath.Join(dir, "vllm"), filepath.Join(dir, "medusa")} {
			back, err := LoadHeads(sub)
			if err != nil {
				t.Fatal(err)
			}
			if back.Geometry.Hidden != 8 || back.Vocab != 13 || back.Heads != 3 || back.Layers != 2 {
				t.Fatalf("%s: geometry %+v", sub, back.Geometry)
			}
			sa, err := m.NewScorer(cpu.New(be), g.Heads)
			if err != nil {
				t.Fatal(err)
			}
			sb, err := back.NewScorer(cpu.New(be), g.Heads)
			if err != nil {
				t.Fatal(err)
			}
			for r := 0; r < rows; r++ {
				if a, b := sa.Score(x[r*g.Hidden:]), sb.Score(x[r*g.Hidden:]); !reflect.DeepEqual(a, b) {
					t.Fatalf("shared=%v %s row %d: logits differ after the round trip", shared, sub, r)
				}
			}
		}
	}
}

func checkKeys(t *testing.T, s *safetensors.Set, want map[string][]int) {
	t.Helper()
	if len(s.Names()) != len(want) {
		t.Errorf("%d tensors %v, want %d", len(s.Names()), s.Names(), len(want))
	}
	for name, shape := range want {
		info, ok := s.Info(name)
		if !ok {
			t.Errorf("missing tensor %q", name)
			continue
		}
		if !reflect.DeepEqual(info.Shape, shape) || info.DType != safetensors.F32 {
			t.Errorf("%s: %s %v, want F32 %v", name, info.DType, info.Shape, shape)
		}
	}
}

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }

// TestExportRefusesNonFinite: heads with a NaN or infinite weight, or a value
// the export dtype turns into infinity, are not exported; nothing is written.
func TestExportRefusesNonFinite(t *testing.T) {
	g := Geometry{Hidden: 8, Vocab: 13, Heads: 3, Layers: 2}
	for _, c := range []struct {
		dt   safetensors.DType
		set  func(m *Heads)
		want []string
	}{
		{safetensors.F32, func(m *Heads) { m.W[1][1][9] = float32(math.NaN()) }, []string{`"blocks.1.layers.1.weight"`, "NaN at element 9 (index [1, 1]"}},
		{safetensors.BF16, func(m *Heads) { m.LMHead[2][20] = float32(math.Inf(-1)) }, []string{`"lm_heads.2.weight"`, "-Inf at element 20"}},
		{safetensors.F16, func(m *Heads) { m.B[0][0][3] = 1e5 }, []string{`"blocks.0.layers.0.bias" (F16 [8]) holds +Inf at element 3`, "F16's range"}},
	} {
		m, _ := randomHeads(t, g, 3)
		c.set(m)
		dir := filepath.Join(t.TempDir(), "out")
		err := Export(dir, m, ExportInfo{DType: c.dt})
		if err == nil {
			t.Fatalf("%s: heads with a non-finite weight exported", c.dt)
		}
		t.Log(err)
		for _, w := range append(c.want, "refusing to export", dir, "nothing written") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.dt, err, w)
			}
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: the refused export created %s (%v)", c.dt, dir, err)
		}
	}
}

// TestScorerAllocatesNothing: a drafting step (every head on one position,
// their blocks in place, shared or own lm_heads) allocates nothing.
func TestScorerAllocatesNothing(t *testing.T) {
	for _, shared := range []bool{false, true} {
		g := Geometry{Hidden: 8, Vocab: 13, Heads: 3, Layers: 2, SharedLMHead: shared}
		m, _ := randomHeads(t, g, 7)
		s, err := m.NewScorer(cpu.New(cpu.DefaultBackend()), g.Heads)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, g.Hidden)
		x[3] = 1
		if a := testing.AllocsPerRun(20, func() { s.Score(x) }); a != 0 {
			t.Fatalf("shared=%v: a drafting step allocates %v times", shared, a)
		}
	}
}

// TestDetectOneLayoutPerFolder: each layout's folder is detected as that
// layout, and a folder holding both layouts' files (FasterDecoding's weights
// beside a vLLM config and weights: one config.json cannot describe both)
// is refused, naming both, where it was read as FasterDecoding's and then
// failed on the config.
func TestDetectOneLayoutPerFolder(t *testing.T) {
	g := Geometry{Hidden: 8, Vocab: 13, Heads: 2, Layers: 1}
	m, _ := randomHeads(t, g, 5)
	dir := t.TempDir()
	if err := Export(dir, m, ExportInfo{}); err != nil {
		t.Fatal(err)
	}
	for _, l := range (Method{}).Layouts() {
		if got, err := (Method{}).Detect(filepath.Join(dir, l)); err != nil || got != l {
			t.Fatalf("%s/: detected %q (%v)", l, got, err)
		}
	}
	both := filepath.Join(dir, MedusaDir)
	for _, f := range []string{"config.json", VLLMWeights} {
		b, err := os.ReadFile(filepath.Join(dir, VLLMDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(both, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := (Method{}).Detect(both)
	if err == nil || !strings.Contains(err.Error(), "two layouts, vllm and medusa") || !strings.Contains(err.Error(), both) {
		t.Fatalf("a folder of both layouts: %v", err)
	}
}

// TestExportOmitsNilMetrics: a run that held nothing out hands Export a nil
// *Metrics; drafter.json then has no metrics, as when the field was typed.
func TestExportOmitsNilMetrics(t *testing.T) {
	type metrics struct{ Step int }
	m, _ := randomHeads(t, Geometry{Hidden: 4, Vocab: 5, Heads: 1, Layers: 1}, 1)
	dir := t.TempDir()
	if err := Export(dir, m, ExportInfo{Metrics: (*metrics)(nil)}); err != nil {
		t.Fatal(err)
	}
	if v, ok := testutil.ReadJSON(t, filepath.Join(dir, "drafter.json"))["metrics"]; ok {
		t.Fatalf("drafter.json records metrics %v for a nil *Metrics", v)
	}
}
