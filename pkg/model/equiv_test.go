package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// maxDiff returns the largest absolute difference of two float32 vectors.
func maxDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func mustSeq(t testing.TB, m *Model, n int) *Sequence {
	t.Helper()
	s, err := m.NewSequence(n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run does one forward pass and returns copies of every input's logits.
func run(t testing.TB, m *Model, batch []Input, opt Options) ([][]float32, *Result) {
	t.Helper()
	res, err := m.Forward(batch, opt)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]float32, len(batch))
	for b := range batch {
		out[b] = append([]float32(nil), res.LogitsOf(b)...)
	}
	return out, res
}

// testModels returns the real stories260k model and a random Qwen3-style one.
func testModels(t *testing.T) map[string]*Model {
	ms := map[string]*Model{"stories260k": loadModel(t, "stories260k")}
	for _, c := range archCases() {
		if strings.HasPrefix(c.name, "qwen3") {
			ms[c.name], _ = buildCase(t, c, 3)
		}
	}
	return ms
}

func randTokens(rng *rand.Rand, n, vocab int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = rng.IntN(vocab)
	}
	return ids
}

// const equivTol bounds float32 differences from a different summation order
// (matrix-vector vs matrix-matrix kernels, direct vs backend attention).
const equivTol = 1e-4

// TestCachedDecodeEqualsRecompute: one prefill of a whole sequence with logits
// at every position equals a short prefill followed by cached single-token
// steps, and equals prefill in uneven chunks.
func TestCachedDecodeEqualsRecompute(t *testing.T) {
	for name, m := range testModels(t) {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			toks := randTokens(rng, 70, m.VocabSize())
			V := m.VocabSize()
			full, _ := run(t, m, []Input{{Seq: mustSeq(t, m, 70), Tokens: toks, Logits: LogitsAll}}, Options{})
			seq := mustSeq(t, m, 70)
			for p := 0; p < len(toks); p++ {
				got, _ := run(t, m, []Input{{Seq: seq, Tokens: toks[p : p+1]}}, Options{})
				if d := maxDiff(got[0], full[0][p*V:(p+1)*V]); d > equivTol {
					t.Fatalf("position %d: cached decode differs from recompute by %g", p, d)
				}
			}
			seq.Reset()
			for _, ch := range [][2]int{{0, 3}, {3, 13}, {13, 14}, {14, 45}, {45, 70}} {
				got, _ := run(t, m, []Input{{Seq: seq, Tokens: toks[ch[0]:ch[1]], Logits: LogitsAll}}, Options{})
				if d := maxDiff(got[0], full[0][ch[0]*V:ch[1]*V]); d > equivTol {
					t.Fatalf("chunk %v: chunked prefill differs from recompute by %g", ch, d)
				}
			}
		})
	}
}

// TestBatchedEqualsSingle runs sequences of different lengths together, adding
// and removing sequences between steps and mixing prefill with decode, and
// compares logits and taps with each sequence run alone.
func TestBatchedEqualsSingle(t *testing.T) {
	for name, m := range testModels(t) {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			const nseq = 5
			prompts := make([][]int, nseq)
			for i := range prompts {
				prompts[i] = randTokens(rng, 1+i*4, m.VocabSize()) // 1, 5, 9, 13, 17 tokens
			}
			// active[step] lists the sequences in the batch at that step.
			active := [][]int{{0, 1}, {0, 1, 2}, {0, 2, 3}, {3, 4, 0}, {4}, {1, 4, 2, 3}, {0, 1, 2, 3, 4}}
			taps := []int{0, 2, m.NumLayers(), PreNormLast}
			seqs, solo := make([]*Sequence, nseq), make([]*Sequence, nseq)
			next := make([][]int, nseq) // tokens to feed next
			for i := range seqs {
				seqs[i], solo[i] = mustSeq(t, m, 64), mustSeq(t, m, 64)
				next[i] = prompts[i]
			}
			for step, act := range active {
				batch := make([]Input, len(act))
				for b, i := range act {
					batch[b] = Input{Seq: seqs[i], Tokens: next[i]}
				}
				got, res := run(t, m, batch, Options{Taps: taps})
				gotTaps := make([][][]float32, len(act))
				for b := range act {
					for tp := range taps {
						gotTaps[b] = append(gotTaps[b], append([]float32(nil), res.HiddenOf(tp, b)...))
					}
				}
				for b, i := range act {
					want, wres := run(t, m, []Input{{Seq: solo[i], Tokens: next[i]}}, Options{Taps: taps})
					if d := maxDiff(got[b], want[0]); d > equivTol {
						t.Fatalf("step %d, sequence %d: batched logits differ from solo by %g", step, i, d)
					}
					for tp := range taps {
						if d := maxDiff(gotTaps[b][tp], wres.HiddenOf(tp, 0)); d > equivTol {
							t.Fatalf("step %d, sequence %d, tap %d: batched differs from solo by %g", step, i, taps[tp], d)
						}
					}
					if seqs[i].Len() != solo[i].Len() {
						t.Fatalf("lengths differ: %d vs %d", seqs[i].Len(), solo[i].Len())
					}
					next[i] = []int{argmax(got[b])}
				}
			}
		})
	}
}

func pathTo(parents []int, node int) []int {
	var path []int
	for v := node; v >= 0; v = parents[v] {
		path = append([]int{v}, path...)
	}
	return path
}

// TestTreeEqualsPaths scores a tree in one pass and checks every node's logits
// against scoring its root-to-node path as a plain chain; then commits a path,
// decodes on, and checks that against having decoded the path.
func TestTreeEqualsPaths(t *testing.T) {
	for name, m := range testModels(t) {
		for _, size := range []int{1, 5, 23} { // direct and backend attention paths
			for _, prefixLen := range []int{0, 6} {
				rng := rand.New(rand.NewPCG(uint64(size), uint64(prefixLen)))
				V := m.VocabSize()
				prefix := randTokens(rng, prefixLen, V)
				parents := testutil.RandomTree(rng, size)
				if size > 1 {
					parents[1] = 0 // at least one path of depth 2
				}
				tokens := randTokens(rng, size, V)
				seq := mustSeq(t, m, 64)
				if prefixLen > 0 {
					run(t, m, []Input{{Seq: seq, Tokens: prefix}}, Options{})
				}
				tree, tres := run(t, m, []Input{{Seq: seq, Tokens: tokens, Parents: parents}}, Options{Taps: []int{1}})
				treeTap := append([]float32(nil), tres.HiddenOf(0, 0)...)
				if seq.Pending() != size || seq.Len() != prefixLen {
					t.Fatalf("%s: after a tree pass: len %d pending %d", name, seq.Len(), seq.Pending())
				}
				for node := 0; node < size; node++ {
					path := pathTo(parents, node)
					ptoks := make([]int, len(path))
					for j, v := range path {
						ptoks[j] = tokens[v]
					}
					ref := mustSeq(t, m, 64)
					want, wres := run(t, m, []Input{{Seq: ref, Tokens: append(append([]int(nil), prefix...), ptoks...), Logits: LogitsLast}}, Options{Taps: []int{1}})
					if d := maxDiff(tree[0][node*V:(node+1)*V], want[0]); d > equivTol {
						t.Fatalf("%s size %d prefix %d: tree node %d (path %v) differs from the chain by %g", name, size, prefixLen, node, path, d)
					}
					H := m.HiddenSize()
					wt := wres.HiddenOf(0, 0)
					if d := maxDiff(treeTap[node*H:(node+1)*H], wt[len(wt)-H:]); d > equivTol {
						t.Fatalf("%s: tree node %d tap differs from the chain by %g", name, node, d)
					}
				}
				// Commit the path to the deepest node, decode one more token.
				deep := 0
				for v := range parents {
					if len(pathTo(parents, v)) > len(pathTo(parents, deep)) {
						deep = v
					}
				}
				path := pathTo(parents, deep)
				if err := seq.Commit(path); err != nil {
					t.Fatal(err)
				}
				if seq.Len() != prefixLen+len(path) || seq.Pending() != 0 {
					t.Fatalf("after commit: len %d pending %d", seq.Len(), seq.Pending())
				}
				extra := []int{rng.IntN(V), rng.IntN(V)}
				got, _ := run(t, m, []Input{{Seq: seq, Tokens: extra, Logits: LogitsAll}}, Options{})
				ref := mustSeq(t, m, 64)
				all := append([]int(nil), prefix...)
				for _, v := range path {
					all = append(all, tokens[v])
				}
				run(t, m, []Input{{Seq: ref, Tokens: all}}, Options{})
				want, _ := run(t, m, []Input{{Seq: ref, Tokens: extra, Logits: LogitsAll}}, Options{})
				if d := maxDiff(got[0], want[0]); d > equivTol {
					t.Fatalf("%s size %d prefix %d: decoding after Commit(%v) differs from decoding the path by %g", name, size, prefixLen, path, d)
				}
			}
		}
	}
}

// TestCommitChain verifies a draft chain as a tree, accepts a prefix of it, and
// checks the cache equals plain decoding of the accepted tokens; committing a
// whole chain equals appending it.
func TestCommitChain(t *testing.T) {
	m := loadModel(t, "stories260k")
	rng := rand.New(rand.NewPCG(9, 9))
	prefix := randTokens(rng, 4, m.VocabSize())
	draft := randTokens(rng, 4, m.VocabSize())
	for _, keep := range []int{0, 2, 4} {
		seq := mustSeq(t, m, 32)
		run(t, m, []Input{{Seq: seq, Tokens: prefix}}, Options{})
		run(t, m, []Input{{Seq: seq, Tokens: draft, Parents: []int{-1, 0, 1, 2}}}, Options{})
		if err := seq.Commit([]int{0, 1, 2, 3}[:keep]); err != nil {
			t.Fatal(err)
		}
		got, _ := run(t, m, []Input{{Seq: seq, Tokens: []int{5}}}, Options{})
		ref := mustSeq(t, m, 32)
		want, _ := run(t, m, []Input{{Seq: ref, Tokens: append(append([]int(nil), prefix...), append(draft[:keep:keep], 5)...)}}, Options{})
		if d := maxDiff(got[0], want[0]); d > equivTol {
			t.Fatalf("keep %d: differs by %g", keep, d)
		}
	}
	// Truncate after a plain chain forward discards rejected draft rows.
	seq := mustSeq(t, m, 32)
	run(t, m, []Input{{Seq: seq, Tokens: append(append([]int(nil), prefix...), draft...)}}, Options{})
	if err := seq.Truncate(len(prefix) + 1); err != nil {
		t.Fatal(err)
	}
	got, _ := run(t, m, []Input{{Seq: seq, Tokens: []int{5}}}, Options{})
	ref := mustSeq(t, m, 32)
	want, _ := run(t, m, []Input{{Seq: ref, Tokens: append(append([]int(nil), prefix...), draft[0], 5)}}, Options{})
	if d := maxDiff(got[0], want[0]); d > equivTol {
		t.Fatalf("truncate: differs by %g", d)
	}
}

// TestDecodeDoesNotAllocate checks the steady-state decode loop, single and
// batched, allocates nothing, on float32 and on bf16 weights.
func TestDecodeDoesNotAllocate(t *testing.T) {
	bf16Dir, _ := convertCheckpoint(t, testutil.Stories260k(), safetensors.BF16)
	bf16, err := Load(bf16Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bf16.Close()
	for _, m := range []*Model{loadModel(t, "stories260k"), bf16} {
		seqs := []*Sequence{mustSeq(t, m, 512), mustSeq(t, m, 512), mustSeq(t, m, 512)}
		batch := []Input{{Seq: seqs[0], Tokens: []int{1, 2, 3}}, {Seq: seqs[1], Tokens: []int{1}}, {Seq: seqs[2], Tokens: []int{7, 8}}}
		opt := Options{Taps: []int{2, m.NumLayers()}}
		run(t, m, batch, opt) // grow the scratch
		tok := [][]int{{9}, {10}, {11}}
		for b := range batch {
			batch[b].Tokens = tok[b]
		}
		for _, n := range []int{1, 3} {
			allocs := testing.AllocsPerRun(50, func() {
				if _, err := m.Forward(batch[:n], opt); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%s weights: decode of %d sequences allocates %v times per step", m.Embed.DType, n, allocs)
			}
		}
	}
}

// TestUnfusedEqualsFused checks the separate q/k/v and gate/up products give
// the same result as the fused matrices the loaders set up.
func TestUnfusedEqualsFused(t *testing.T) {
	m := loadModel(t, "stories260k")
	toks := []int{1, 403, 407, 261, 378, 9, 30, 31, 32, 33, 34}
	fused, _ := run(t, m, []Input{{Seq: mustSeq(t, m, 16), Tokens: toks, Logits: LogitsAll}}, Options{})
	for i := range m.Layers {
		if m.Layers[i].Attn.nn.QKV.Empty() || m.Layers[i].MLP.nn.GateUp.Empty() {
			t.Fatalf("layer %d: loader did not fuse the weights", i)
		}
		m.Layers[i].Attn.nn.QKV, m.Layers[i].MLP.nn.GateUp = tensor.Weight{}, tensor.Weight{}
	}
	plain, _ := run(t, m, []Input{{Seq: mustSeq(t, m, 16), Tokens: toks, Logits: LogitsAll}}, Options{})
	if d := maxDiff(fused[0], plain[0]); d > equivTol {
		t.Fatalf("unfused differs from fused by %g", d)
	}
}

// TestChainTreeMatchesDecode checks that verifying a chain-shaped draft (a
// tree whose every node continues the previous one, as eval passes a chain)
// gives each node exactly, bit for bit, the logits a one-token decode step
// gives the same token at the same position, so that greedy speculative
// decoding reproduces greedy decoding even where two logits nearly tie.
func TestChainTreeMatchesDecode(t *testing.T) {
	for name, m := range testModels(t) {
		V := m.VocabSize()
		for _, size := range []int{1, 5, 8, 13} {
			rng := rand.New(rand.NewPCG(uint64(size), 7))
			prefix := randTokens(rng, 17, V)
			tokens := randTokens(rng, size, V)
			dec := mustSeq(t, m, 64)
			run(t, m, []Input{{Seq: dec, Tokens: prefix}}, Options{})
			var want [][]float32
			for _, tok := range tokens {
				lg, _ := run(t, m, []Input{{Seq: dec, Tokens: []int{tok}, Logits: LogitsLast}}, Options{})
				want = append(want, lg[0])
			}
			ver := mustSeq(t, m, 64)
			run(t, m, []Input{{Seq: ver, Tokens: prefix}}, Options{})
			parents := make([]int, size)
			for i := range parents {
				parents[i] = i - 1
			}
			got, _ := run(t, m, []Input{{Seq: ver, Tokens: tokens, Parents: parents, Logits: LogitsAll}}, Options{})
			for i := range tokens {
				row := got[0][i*V : (i+1)*V]
				for j, v := range row {
					if math.Float32bits(v) != math.Float32bits(want[i][j]) {
						t.Fatalf("%s chain of %d: node %d logit %d = %v, decode step %v", name, size, i, j, v, want[i][j])
					}
				}
			}
		}
	}
}
