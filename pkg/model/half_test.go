package model

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// Checkpoints in bf16 and f16 against the float64 reference (naive_test.go)
// run on the same 16-bit weights widened exactly. The model widens the
// weights exactly too and computes in float32, so it differs from the
// reference by float32 rounding only, as a float32 checkpoint does: the
// tolerances are TestAgainstNaive's.
//
// One exception: where cpu.RoundsBF16Activations (AVX512_BF16), a bf16
// model's products of more than tensor.FewRows rows (a prefill of more
// than 48 tokens) round their inputs to bfloat16, which moves the logits by
// far more than halfTol (stories260k: 0.072 of a largest logit of 18.9; the
// 60M model: 0.008-0.011 of 2.4). The reference then rounds the inputs of
// the same products at the same positions (naiveCfg.bf16Rows), and the
// logits must be within halfTol of it, or within bf16Tol at positions where
// a rounding flip happened: where a product's input lies within float32
// noise of a bfloat16 rounding midpoint, the model and the reference round
// it to neighbouring bfloat16 values (2^-8 of that input apart), and the
// positions downstream of it differ by more than float32 noise. How often
// depends on the model: stories260k matches the rounded reference within
// 5e-6 at 56 of 57 positions (one flip, 0.0073 = 3.9e-4 of its largest
// logit), which shows the model rounds exactly what the reference rounds;
// the 60M model has flips at every position of a 51-token prefill (up to
// 0.0095 = 3.9e-3 of its largest logit), and jittering the reference's own
// product inputs by 1e-7 relative before rounding moves its logits by as
// much (0.0064-0.0095), so no float32 computation that rounds the
// activations can be held closer to one reference. bf16Tol is a stated
// tolerance, not a bound: twice the largest flip seen. The kernel's
// arithmetic itself is tested exactly in pkg/tensor/internal/kernel
// (TestGemmBF16, against a float64 reference within float32 rounding).

// halfTol is the largest difference allowed between a 16-bit model's logits
// and the float64 reference's on the same weights, relative to the largest
// reference logit (at least 1).
const halfTol = 2e-5

// bf16Tol is the largest difference allowed, relative to the largest
// reference logit, at the prefill positions past halfTol where products
// round their inputs to bfloat16 and a rounding flip happened (see above).
const bf16Tol = 2 * 3.9e-3

// readWeights returns every tensor of dir/model.safetensors widened to
// float32 (exactly, for 16-bit ones), with the shapes.
func readWeights(t testing.TB, dir string) (map[string][]float32, map[string][]int) {
	t.Helper()
	s, err := safetensors.Open(filepath.Join(dir, safetensors.SingleFile))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, shapes := map[string][]float32{}, map[string][]int{}
	for _, name := range s.Names() {
		v, shape, err := s.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		w[name], shapes[name] = v, shape
	}
	return w, shapes
}

// convertCheckpoint writes the model in dir as a checkpoint of dtype dt in a
// new temporary folder and returns the folder and the weights it holds
// (widened to float32: the 16-bit values exactly).
func convertCheckpoint(t testing.TB, dir string, dt safetensors.DType) (string, map[string][]float32) {
	t.Helper()
	w, shapes := readWeights(t, dir)
	var config map[string]any
	readJSON(t, filepath.Join(dir, "config.json"), &config)
	out := writeCheckpointAs(t, config, w, shapes, dt)
	rounded, _ := readWeights(t, out)
	return out, rounded
}

// naiveFor returns the reference's configuration of a Llama checkpoint
// without rope scaling or biases.
func naiveFor(c *checkpoint.Config) naiveCfg {
	return naiveCfg{h: c.HiddenSize, inter: c.IntermediateSize, layers: c.NumLayers, heads: c.NumHeads, kvHeads: c.NumKVHeads,
		hd: c.HeadDim, vocab: c.VocabSize, eps: c.RMSNormEps, theta: c.RopeTheta, tied: c.TieWordEmbeddings}
}

// checkHalfModel checks m, whose weights are w in a 16-bit dtype, against
// the reference: the logits of a prefill of tokens at every position within
// halfTol (the reference rounding the products' inputs to bfloat16 where
// the model does, with bf16Tol at positions past a rounding flip: see the
// top of the file), and the greedy continuation of
// tokens[:prompt] by n cached decode steps token for token the reference's
// greedy choice at each position (with the smallest margin between the
// reference's best two logits logged; a prompt of more than FewRows tokens
// is a prefill that rounds, and the reference rounds those positions).
func checkHalfModel(t *testing.T, m *Model, c naiveCfg, w map[string][]float32, tokens []int, prompt, n int) {
	t.Helper()
	// roundRows returns naiveCfg.bf16Rows for a forward that starts with a
	// prefill of rows tokens: all of them where its products round their
	// inputs, none where they do not.
	rounds := m.Layers[0].MLP.Down.W.DType == tensor.BF16 && cpu.RoundsBF16Activations()
	roundRows := func(rows int) int {
		if rounds && rows > tensor.FewRows {
			return rows
		}
		return 0
	}
	pc := c
	pc.bf16Rows = roundRows(len(tokens))
	rounded := pc.bf16Rows > 0
	want, _ := naiveForward(pc, w, tokens)
	plain := want
	if rounded {
		plain, _ = naiveForward(c, w, tokens)
	}
	scale := 1.0
	for _, row := range want {
		for _, v := range row {
			scale = math.Max(scale, math.Abs(v))
		}
	}
	tol := halfTol * scale
	seq := mustSeq(t, m, len(tokens)+n)
	res, err := m.Forward([]Input{{Seq: seq, Tokens: tokens, Logits: LogitsAll}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	worst, worstPlain, worstFlip, flips := 0.0, 0.0, 0.0, 0
	V := m.VocabSize()
	for p := range tokens {
		got := res.LogitsOf(0)[p*V : (p+1)*V]
		worstPlain = math.Max(worstPlain, maxAbsDiff32(got, plain[p]))
		d := maxAbsDiff32(got, want[p])
		if d > tol && rounded && d <= bf16Tol*scale {
			// A rounding flip upstream (see the top of the file).
			flips++
			worstFlip = math.Max(worstFlip, d)
			continue
		}
		if d > tol {
			t.Fatalf("prefill logits at position %d differ from the reference by %g (> %g)", p, d, tol)
		}
		worst = math.Max(worst, d)
	}
	if rounded {
		t.Logf("prefill products rounded their inputs to bfloat16: %d of %d positions past the tolerance by a rounding flip (up to %.2g); the logits are %.2g from the unrounded reference",
			flips, len(tokens), worstFlip, worstPlain)
	}
	// Greedy decode, one cached step at a time.
	seq.Reset()
	gen := slices.Clone(tokens[:prompt])
	in := []Input{{Seq: seq, Tokens: gen}}
	for i := 0; i < n; i++ {
		res, err := m.Forward(in, Options{})
		if err != nil {
			t.Fatal(err)
		}
		next := argmax(res.LogitsOf(0))
		gen = append(gen, next)
		in[0].Tokens = gen[len(gen)-1:]
	}
	// The prompt's prefill rounded its products' inputs if it had more than
	// FewRows tokens; the decode steps did not.
	gc := c
	gc.bf16Rows = roundRows(prompt)
	ref, _ := naiveForward(gc, w, gen)
	margin := math.Inf(1)
	for p := prompt - 1; p < len(gen)-1; p++ {
		best, second := -1, -1
		for j, v := range ref[p] {
			if best < 0 || v > ref[p][best] {
				best, second = j, best
			} else if second < 0 || v > ref[p][second] {
				second = j
			}
		}
		if gen[p+1] != best {
			t.Fatalf("greedy token %d after position %d: the model chose %d, the reference %d", p+1-prompt, p, gen[p+1], best)
		}
		margin = math.Min(margin, ref[p][best]-ref[p][second])
	}
	t.Logf("worst logit difference %.2g (tolerance %.2g, largest |logit| %.3g); %d greedy tokens match the reference, smallest top-2 margin %.3g",
		worst, tol, scale, n, margin)
}

// TestHalfAgainstNaive: stories260k converted to bf16 and f16, the four
// architecture variants of TestAgainstNaive in bf16, and the 60M benchmark
// model in bf16, each against the float64 reference on the same 16-bit
// weights.
func TestHalfAgainstNaive(t *testing.T) {
	// Past tensor.FewRows tokens, so that the prefill runs the 16-bit GEMM and
	// the decode steps the few-row kernels.
	tokens := []int{1, 403, 407, 261, 378, 9, 30, 31, 32, 33, 34, 260, 270, 300}
	for len(tokens) <= tensor.FewRows+8 {
		tokens = append(tokens, (len(tokens)*193+7)%512)
	}
	for _, dt := range []safetensors.DType{safetensors.BF16, safetensors.F16} {
		t.Run("stories260k/"+string(dt), func(t *testing.T) {
			dir, w := convertCheckpoint(t, testutil.Stories260k(), dt)
			m, err := Load(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if want, _ := halfDType(dt); m.Embed.DType != want || m.Layers[0].MLP.Down.W.DType != want {
				t.Fatalf("embedding held as %s, want the checkpoint's %s", m.Embed.DType, dt)
			}
			// A prompt past FewRows tokens: its prefill runs the GEMM (and
			// rounds, in bf16 with AVX512_BF16), the greedy steps after it
			// the few-row kernels.
			checkHalfModel(t, m, naiveFor(m.Config), w, tokens, tensor.FewRows+1, 24)
		})
	}
	for _, c := range archCases() {
		t.Run(c.name+"/BF16", func(t *testing.T) {
			m, rounded := buildCaseAs(t, c, 7, safetensors.BF16)
			checkHalfModel(t, m, c.naive, rounded, []int{1, 17, 42, 5, 96, 3, 3, 60, 11, 0, 88, 23}, 3, 12)
		})
	}
	t.Run("random60M/BF16", func(t *testing.T) {
		if testing.Short() {
			t.Skip("the float64 reference of the 60M model takes seconds: skipped in -short mode")
		}
		cfg := Bench60MConfig()
		m, err := NewRandomAs(cfg, 1, tensor.BF16, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		w, _, err := RandomWeights(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range w {
			roundBF16(v)
		}
		checkHalfModel(t, m, naiveFor(cfg), w, []int{1, 4000, 17, 31999, 256, 9000}, 3, 4)
		// A prefill past FewRows tokens at the model's real widths (the
		// bf16 GEMM's products of 512, 1024, 1536 and 32000 features), and
		// greedy steps after it.
		long := []int{1, 4000, 17, 31999, 256, 9000}
		for len(long) <= tensor.FewRows+2 {
			long = append(long, (len(long)*7919+11)%cfg.VocabSize)
		}
		checkHalfModel(t, m, naiveFor(cfg), w, long, tensor.FewRows+1, 2)
	})
}

// roundBF16 rounds v to bfloat16 values in place with pkg/safetensors'
// encoder (nearest, ties to even), which the model's kernels did not write.
func roundBF16(v []float32) {
	b := make([]byte, 2*len(v))
	safetensors.EncodeBF16(b, v)
	safetensors.DecodeBF16(v, b)
}

// TestHalfInPlace: a bf16 checkpoint's matrices are read in place from the
// mapped file (no float32 copy, fused where adjacent), the norms widened to
// float32; a file whose data starts at an odd offset, which cannot be viewed
// as uint16, is copied once and computes the same bits; NewRandomAs builds
// the model Load builds from the same weights written as bf16; Close
// releases the files.
func TestHalfInPlace(t *testing.T) {
	dir, _ := convertCheckpoint(t, testutil.Stories260k(), safetensors.BF16)
	m, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, safetensors.SingleFile))
	if err != nil {
		t.Fatal(err)
	}
	mem := m.Memory()
	if mem.Mapped != mem.Bytes[tensor.BF16] || mem.Bytes[tensor.BF16] == 0 || mem.Bytes[tensor.F32] >= mem.Bytes[tensor.BF16]/10 {
		t.Fatalf("memory %+v: want the bf16 matrices mapped and only the norms in float32", mem)
	}
	if mem.Total() > st.Size() {
		t.Fatalf("weights occupy %d bytes, more than the %d-byte file", mem.Total(), st.Size())
	}
	// The writer orders tensors by name, as Hugging Face's does: gate_proj
	// and up_proj lie back to back and are fused in place; k_proj, o_proj,
	// q_proj, v_proj do not, and stay three products.
	for i, l := range m.Layers {
		if l.MLP.nn.GateUp.Empty() || !l.Attn.nn.QKV.Empty() || l.MLP.nn.GateUp.ExtraBytes() != 0 || l.Attn.O.nn.W.ExtraBytes() != 0 || m.lm.ExtraBytes() != 0 {
			t.Fatalf("layer %d: gate/up not fused in place, q/k/v fused though apart in the file, or a transposed copy made of bf16 weights", i)
		}
	}
	set, err := safetensors.Open(filepath.Join(dir, safetensors.SingleFile))
	if err != nil {
		t.Fatal(err)
	}
	fp, err := Footprint(m.Config, set)
	set.Close()
	if err != nil || !reflect.DeepEqual(fp, mem) {
		t.Fatalf("Footprint %+v (%v), the loaded model's Memory %+v", fp, err, mem)
	}
	toks := []int{1, 403, 407, 261, 378, 9, 30, 31, 32, 33, 34}
	want, _ := run(t, m, []Input{{Seq: mustSeq(t, m, 16), Tokens: toks, Logits: LogitsAll}}, Options{})

	// The same file with one more header byte: every tensor at an odd address.
	odd := t.TempDir()
	testutil.CopyFile(t, filepath.Join(dir, "config.json"), filepath.Join(odd, "config.json"))
	b, err := os.ReadFile(filepath.Join(dir, safetensors.SingleFile))
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	shifted := binary.LittleEndian.AppendUint64(nil, n+1)
	shifted = append(append(append(shifted, b[8:8+n]...), ' '), b[8+n:]...)
	if err := os.WriteFile(filepath.Join(odd, safetensors.SingleFile), shifted, 0o644); err != nil {
		t.Fatal(err)
	}
	mo, err := Load(odd, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The copy is laid out in the model's order: q/k/v fused too.
	if mm := mo.Memory(); mm.Mapped != 0 || mm.Bytes[tensor.BF16] != mem.Bytes[tensor.BF16] || mo.Layers[0].Attn.nn.QKV.Empty() || mo.Layers[0].MLP.nn.GateUp.Empty() {
		t.Fatalf("odd offsets: memory %+v, q/k/v fused %v; want an aligned bf16 copy, fused", mm, !mo.Layers[0].Attn.nn.QKV.Empty())
	}
	got, _ := run(t, mo, []Input{{Seq: mustSeq(t, mo, 16), Tokens: toks, Logits: LogitsAll}}, Options{})
	if !bitsEqual(got[0], want[0]) {
		t.Fatal("the copied weights compute other logits than the mapped ones")
	}
	mo.Close()

	// NewRandomAs equals Load of the same weights written as bf16.
	cfg := m.Config
	w, shapes, err := RandomWeights(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	var config map[string]any
	readJSON(t, filepath.Join(dir, "config.json"), &config)
	ml, err := Load(writeCheckpointAs(t, config, w, shapes, safetensors.BF16), nil)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := NewRandomAs(cfg, 3, tensor.BF16, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := run(t, ml, []Input{{Seq: mustSeq(t, ml, 16), Tokens: toks, Logits: LogitsAll}}, Options{})
	r, _ := run(t, mr, []Input{{Seq: mustSeq(t, mr, 16), Tokens: toks, Logits: LogitsAll}}, Options{})
	if !bitsEqual(a[0], r[0]) {
		t.Fatal("NewRandomAs(bf16) computes other logits than Load of the same weights written as bf16")
	}
	ml.Close()

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("closing twice: %v", err)
	}
}

// bitsEqual reports whether a and b hold the same float32 bits.
func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// closeCounter is a WeightSource that counts its Close calls.
type closeCounter struct {
	*safetensors.Set
	closed int
}

func (c *closeCounter) Close() error {
	c.closed++
	return c.Set.Close()
}

// TestFromWeightsOwnsTheStore: FromWeights closes the store at once when
// it copied every weight (float32), keeps it open while it reads 16-bit
// weights in place and closes it in Model.Close, and closes it when it
// fails.
func TestFromWeightsOwnsTheStore(t *testing.T) {
	bf16, _ := convertCheckpoint(t, testutil.Stories260k(), safetensors.BF16)
	open := func(dir string) (*checkpoint.Config, *closeCounter) {
		t.Helper()
		ck, err := checkpoint.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return ck.Config, &closeCounter{Set: ck.Weights}
	}
	cfg, w := open(testutil.Stories260k())
	m, err := FromWeights(cfg, w, nil)
	if err != nil || w.closed != 1 {
		t.Fatalf("float32: %v; store closed %d times at load, want 1", err, w.closed)
	}
	m.Close()
	if w.closed != 1 {
		t.Fatalf("float32: Model.Close closed the store again")
	}
	cfg, w = open(bf16)
	m, err = FromWeights(cfg, w, nil)
	if err != nil || w.closed != 0 {
		t.Fatalf("bf16: %v; store closed %d times at load, want 0", err, w.closed)
	}
	m.Close()
	m.Close()
	if w.closed != 1 {
		t.Fatalf("bf16: store closed %d times by two Model.Close, want 1", w.closed)
	}
	cfg, w = open(bf16)
	bad := *cfg
	bad.NumLayers++
	if _, err := FromWeights(&bad, w, nil); err == nil || !strings.Contains(err.Error(), "no tensor") || w.closed != 1 {
		t.Fatalf("a config the weights do not fit: %v; store closed %d times, want 1", err, w.closed)
	}
}
