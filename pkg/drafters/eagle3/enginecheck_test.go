package eagle3

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// engineBatch is a saved batch for the engine-style forward: the fused
// target features of T context positions, the token following each, the
// target ids fed at the chain's later steps, and the target's embedding.
type engineBatch struct {
	feats  []float32 // [T, 3H]
	tokens []int32   // [T]
	chain  []int32   // [K-1]
	embed  []float32 // [V, H]
}

func newEngineBatch(g Geometry, T, K int, seed uint64) engineBatch {
	r := rand.New(rand.NewPCG(seed, 3))
	h := g.Hidden
	b := engineBatch{feats: make([]float32, T*Features*h), embed: make([]float32, g.Vocab*h)}
	// Each feature layer at its own scale, as a target's residual stream
	// grows with depth: the norms before fc then change the result, and a
	// norm applied to the wrong chunk shows.
	for i := range T {
		for c := range Features {
			scale := []float64{0.5, 3, 20}[c]
			for j := range h {
				b.feats[(i*Features+c)*h+j] = float32(scale * r.NormFloat64())
			}
		}
	}
	for i := range b.embed {
		b.embed[i] = float32(r.NormFloat64())
	}
	for range T {
		b.tokens = append(b.tokens, int32(r.IntN(g.Vocab)))
	}
	for range K - 1 {
		b.chain = append(b.chain, int32(r.IntN(g.Vocab)))
	}
	return b
}

func (b engineBatch) write(t *testing.T, path string, g Geometry) {
	t.Helper()
	i64 := func(v []int32) []int64 {
		out := make([]int64, len(v))
		for i, x := range v {
			out[i] = int64(x)
		}
		return out
	}
	ts := []safetensors.Tensor{
		safetensors.F32Tensor("features", []int{len(b.tokens), Features * g.Hidden}, b.feats),
		safetensors.I64Tensor("tokens", []int{len(b.tokens)}, i64(b.tokens)),
		safetensors.I64Tensor("chain", []int{len(b.chain)}, i64(b.chain)),
		safetensors.F32Tensor("embed", []int{g.Vocab, g.Hidden}, b.embed),
	}
	if err := safetensors.WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
}

// engineParams are export parameters whose norm weights are not one, so
// that a norm weight read from the wrong tensor, or not applied, shows.
func engineParams(g Geometry, seed uint64) *Params {
	p := exportParams(g, seed)
	for _, t := range p.Tensors(g) {
		if len(t.Shape) == 1 {
			for i := range t.Data {
				t.Data[i] = 0.5 + float32((uint64(i)*40503+seed)%997)/997
			}
		}
	}
	return p
}

// runEngine runs the engine-style forward of the export in dir on the batch
// and returns its logits [K][V] and the flags it read.
func runEngine(t *testing.T, python, scripts, dir string, b engineBatch, g Geometry) ([][]float32, map[string]string) {
	t.Helper()
	work := t.TempDir()
	batch, out := filepath.Join(work, "batch.safetensors"), filepath.Join(work, "out.safetensors")
	b.write(t, batch, g)
	cmd := exec.Command(python, filepath.Join(scripts, "eagle3_vllm.py"), dir, batch, out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("engine-style forward: %v\n%s", err, msg)
	}
	set, err := safetensors.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	v, shape, err := set.Float32("logits")
	if err != nil {
		t.Fatal(err)
	}
	K := len(b.chain) + 1
	if len(shape) != 2 || shape[0] != K || shape[1] != g.Vocab {
		t.Fatalf("engine logits of shape %v, want [%d %d]", shape, K, g.Vocab)
	}
	rows := make([][]float32, K)
	for k := range rows {
		rows[k] = v[k*g.Vocab : (k+1)*g.Vocab]
	}
	return rows, set.Metadata()
}

// drafterLogits loads the export in dir with LoadDraft and drafts the
// batch's chain with a session: step 0 after the context, step k after
// the chain's first k tokens. It returns each step's target-vocabulary
// logits.
func drafterLogits(t *testing.T, dir string, b engineBatch, g Geometry) [][]float32 {
	t.Helper()
	d, err := LoadDraft(dir, tensor.F32Matrix(b.embed, g.Vocab, g.Hidden), nil)
	if err != nil {
		t.Fatal(err)
	}
	K := len(b.chain) + 1
	s := d.NewSession(len(b.tokens)+K, K)
	if err := s.Extend(b.feats, b.tokens); err != nil {
		t.Fatal(err)
	}
	out := make([][]float32, K)
	cur := -1
	for k := range K {
		if k > 0 {
			nodes, err := s.AddNodes([]int{cur}, b.chain[k-1:k])
			if err != nil {
				t.Fatal(err)
			}
			cur = nodes[0]
		}
		out[k] = make([]float32, g.Vocab)
		if err := s.TargetLogits(cur, out[k]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// compareLogits returns the first disagreement between drafter's and the
// engine's logits beyond float32 tolerance, and the largest difference.
func compareLogits(got, want [][]float32) (error, float64) {
	worst := 0.0
	for k := range want {
		for v := range want[k] {
			a, b := float64(got[k][v]), float64(want[k][v])
			if math.IsInf(b, -1) || math.IsInf(a, -1) {
				if a != b {
					return fmt.Errorf("step %d target id %d: drafter %g, engine %g (the draft vocabulary maps differently)", k, v, a, b), worst
				}
				continue
			}
			d := math.Abs(a - b)
			worst = max(worst, d)
			if d > 1e-4*(1+math.Abs(b)) {
				return fmt.Errorf("step %d target id %d: drafter %.7g, engine %.7g", k, v, a, b), worst
			}
		}
	}
	return nil, worst
}

// TestEngineForward compares drafter's draft logits at every step of a
// chain with an engine-style forward written from vLLM's code
// (scripts/enginecheck/eagle3_vllm.py: its config translation, with vLLM's
// defaults for absent keys, its weight names and its forward), for plain
// EAGLE-3 and every EAGLE-3.1 switch combination in both layouts. The
// EAGLE-3.1 drafts must differ from plain EAGLE-3 on the same weights, and a
// speculators config without norm_before_residual must not match (vLLM
// assumes true), so the comparison is shown to see the switches.
func TestEngineForward(t *testing.T) {
	python, scripts := testutil.EnginePython(t)
	const T, K = 6, 4
	for _, format := range []string{FormatNative, FormatSpeculators} {
		var plain [][]float32
		for _, n := range append([]Norms{{}}, norms31()...) {
			g := tinyGeometry()
			g.Norms = n
			counts := make([]int64, g.Vocab)
			for i := range counts {
				counts[i] = int64((i * 7) % 11)
			}
			voc, _ := BuildVocab(counts, g.DraftVocab)
			dir := t.TempDir()
			if err := Export(dir, g, engineParams(g, 5), voc, ExportOptions{Format: format, DefaultLayers: true}); err != nil {
				t.Fatal(err)
			}
			b := newEngineBatch(g, T, K, 11)
			want, flags := runEngine(t, python, scripts, dir, b, g)
			for key, on := range map[string]bool{"fc_norm": n.FCNorm, "norm_before_fc": n.NormBeforeFC, "norm_output": n.NormOutput, "norm_before_residual": false} {
				if flags[key] != fmt.Sprint(on) {
					t.Errorf("%s %+v: the engine read %s = %s, want %v", format, n, key, flags[key], on)
				}
			}
			got := drafterLogits(t, dir, b, g)
			err, worst := compareLogits(got, want)
			if err != nil {
				t.Errorf("%s %s: %v", format, n.Variant(), err)
				continue
			}
			t.Logf("%s %+v: %d steps agree, largest difference %.2g", format, n, K, worst)
			if !n.Any() {
				plain = got
			} else if err, _ := compareLogits(got, plain); err == nil {
				t.Errorf("%s %+v: the same logits as plain EAGLE-3: the switches changed nothing", format, n)
			}
		}
	}

	// vLLM's default for an absent norm_before_residual in a speculators
	// config is true: without the key the engine runs another draft.
	g := tinyGeometry()
	counts := make([]int64, g.Vocab)
	voc, _ := BuildVocab(counts, g.DraftVocab)
	dir := t.TempDir()
	if err := Export(dir, g, engineParams(g, 5), voc, ExportOptions{Format: FormatSpeculators, DefaultLayers: true}); err != nil {
		t.Fatal(err)
	}
	b := newEngineBatch(g, T, K, 11)
	got := drafterLogits(t, dir, b, g)
	path := filepath.Join(dir, "config.json")
	raw, _ := os.ReadFile(path)
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "norm_before_residual")
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	want, flags := runEngine(t, python, scripts, dir, b, g)
	if flags["norm_before_residual"] != "true" {
		t.Errorf("the engine read an absent norm_before_residual as %s, want vLLM's true", flags["norm_before_residual"])
	}
	if err, _ := compareLogits(got, want); err == nil {
		t.Error("the engine-style forward ignores norm_before_residual")
	}
}
