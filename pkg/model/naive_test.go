package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// An independent float64 implementation of the four architectures, written
// from the model definitions (not from this package's code): full recompute
// with a causal mask, no cache, no batching. It reads the weights by their
// checkpoint names.

type naiveCfg struct {
	h, inter, layers, heads, kvHeads, hd, vocab int
	eps, theta                                  float64
	ropeType                                    string // "", "linear", "llama3"
	factor, lowFF, highFF                       float64
	origMax                                     int
	qkvBias, oBias, mlpBias, qkNorm, tied       bool
	// bf16Rows: the positions t < bf16Rows round the input of every
	// weight product (q/k/v, o, gate/up, down, lm_head) to bfloat16 before
	// multiplying, as cpu.GemmBF16 does to a bf16 model's products of
	// more than tensor.FewRows rows (a prefill of that many tokens) where
	// cpu.RoundsBF16Activations; the later positions, decode steps of
	// the model, do not.
	bf16Rows int
}

func (c naiveCfg) invFreq() []float64 {
	half := c.hd / 2
	f := make([]float64, half)
	for i := range f {
		f[i] = math.Pow(c.theta, -float64(2*i)/float64(c.hd))
		switch c.ropeType {
		case "linear":
			f[i] /= c.factor
		case "llama3":
			wavelen := 2 * math.Pi / f[i]
			lowWavelen := float64(c.origMax) / c.lowFF
			highWavelen := float64(c.origMax) / c.highFF
			if wavelen > lowWavelen {
				f[i] /= c.factor
			} else if wavelen >= highWavelen {
				t := (float64(c.origMax)/wavelen - c.lowFF) / (c.highFF - c.lowFF)
				f[i] = (1-t)*f[i]/c.factor + t*f[i]
			}
		}
	}
	return f
}

func naiveRMS(x []float64, w []float32, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * r * float64(w[i])
	}
	return out
}

// naiveLinear returns W·x (+b) for W [out, in].
func naiveLinear(x []float64, w []float32, b []float32, out int) []float64 {
	in := len(x)
	y := make([]float64, out)
	for o := 0; o < out; o++ {
		s := 0.0
		for i := 0; i < in; i++ {
			s += float64(w[o*in+i]) * x[i]
		}
		if b != nil {
			s += float64(b[o])
		}
		y[o] = s
	}
	return y
}

// naiveBF16 returns x rounded to float32 and then to bfloat16 (nearest, ties
// to even: pkg/safetensors' encoder, which the model's kernels do not run),
// as the model's float32 activations are rounded.
func naiveBF16(x []float64) []float64 {
	f := make([]float32, len(x))
	for i, v := range x {
		f[i] = float32(v)
	}
	b := make([]byte, 2*len(f))
	safetensors.EncodeBF16(b, f)
	safetensors.DecodeBF16(f, b)
	out := make([]float64, len(x))
	for i, v := range f {
		out[i] = float64(v)
	}
	return out
}

func naiveRope(v []float64, pos int, inv []float64) {
	half := len(v) / 2
	for i := 0; i < half; i++ {
		a := float64(pos) * inv[i]
		c, s := math.Cos(a), math.Sin(a)
		x1, x2 := v[i], v[i+half]
		v[i] = x1*c - x2*s
		v[i+half] = x2*c + x1*s
	}
}

// naiveForward returns the logits of every position and hidden_states[0..L]
// (index L after the final norm), each [T][H].
func naiveForward(c naiveCfg, w map[string][]float32, tokens []int) ([][]float64, [][][]float64) {
	T := len(tokens)
	// bias returns a bias the architecture has (it must be in the weights) or
	// nil for one it has not (whatever the weights hold).
	bias := func(name string, has bool) []float32 {
		if !has {
			return nil
		}
		v, ok := w[name]
		if !ok {
			panic("naive: missing " + name)
		}
		return v
	}
	inv := c.invFreq()
	linear := func(t int, x []float64, w []float32, b []float32, out int) []float64 {
		if t < c.bf16Rows {
			x = naiveBF16(x)
		}
		return naiveLinear(x, w, b, out)
	}
	x := make([][]float64, T)
	emb := w["model.embed_tokens.weight"]
	for t, id := range tokens {
		x[t] = make([]float64, c.h)
		for i := range x[t] {
			x[t][i] = float64(emb[id*c.h+i])
		}
	}
	snap := func() [][]float64 {
		s := make([][]float64, T)
		for t := range x {
			s[t] = append([]float64(nil), x[t]...)
		}
		return s
	}
	hidden := [][][]float64{snap()}
	rep := c.heads / c.kvHeads
	for l := 0; l < c.layers; l++ {
		p := "model.layers." + itoa(l) + "."
		qs, ks, vs := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for t := 0; t < T; t++ {
			a := naiveRMS(x[t], w[p+"input_layernorm.weight"], c.eps)
			qs[t] = linear(t, a, w[p+"self_attn.q_proj.weight"], bias(p+"self_attn.q_proj.bias", c.qkvBias), c.heads*c.hd)
			ks[t] = linear(t, a, w[p+"self_attn.k_proj.weight"], bias(p+"self_attn.k_proj.bias", c.qkvBias), c.kvHeads*c.hd)
			vs[t] = linear(t, a, w[p+"self_attn.v_proj.weight"], bias(p+"self_attn.v_proj.bias", c.qkvBias), c.kvHeads*c.hd)
			for h := 0; h < c.heads; h++ {
				q := qs[t][h*c.hd : (h+1)*c.hd]
				if c.qkNorm {
					copy(q, naiveRMS(q, w[p+"self_attn.q_norm.weight"], c.eps))
				}
				naiveRope(q, t, inv)
			}
			for h := 0; h < c.kvHeads; h++ {
				k := ks[t][h*c.hd : (h+1)*c.hd]
				if c.qkNorm {
					copy(k, naiveRMS(k, w[p+"self_attn.k_norm.weight"], c.eps))
				}
				naiveRope(k, t, inv)
			}
		}
		for t := 0; t < T; t++ {
			att := make([]float64, c.heads*c.hd)
			for h := 0; h < c.heads; h++ {
				g := h / rep
				q := qs[t][h*c.hd : (h+1)*c.hd]
				sc := make([]float64, t+1)
				mx := math.Inf(-1)
				for j := 0; j <= t; j++ {
					s := 0.0
					for d := 0; d < c.hd; d++ {
						s += q[d] * ks[j][g*c.hd+d]
					}
					sc[j] = s / math.Sqrt(float64(c.hd))
					mx = math.Max(mx, sc[j])
				}
				sum := 0.0
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j := range sc {
					for d := 0; d < c.hd; d++ {
						att[h*c.hd+d] += sc[j] / sum * vs[j][g*c.hd+d]
					}
				}
			}
			o := linear(t, att, w[p+"self_attn.o_proj.weight"], bias(p+"self_attn.o_proj.bias", c.oBias), c.h)
			for i := range o {
				x[t][i] += o[i]
			}
			m := naiveRMS(x[t], w[p+"post_attention_layernorm.weight"], c.eps)
			gt := linear(t, m, w[p+"mlp.gate_proj.weight"], bias(p+"mlp.gate_proj.bias", c.mlpBias), c.inter)
			up := linear(t, m, w[p+"mlp.up_proj.weight"], bias(p+"mlp.up_proj.bias", c.mlpBias), c.inter)
			for i := range gt {
				gt[i] = gt[i] / (1 + math.Exp(-gt[i])) * up[i]
			}
			d := linear(t, gt, w[p+"mlp.down_proj.weight"], bias(p+"mlp.down_proj.bias", c.mlpBias), c.h)
			for i := range d {
				x[t][i] += d[i]
			}
		}
		if l < c.layers-1 {
			hidden = append(hidden, snap())
		}
	}
	head := w["lm_head.weight"]
	if c.tied {
		head = w["model.embed_tokens.weight"]
	}
	logits := make([][]float64, T)
	final := make([][]float64, T)
	for t := range x {
		final[t] = naiveRMS(x[t], w["model.norm.weight"], c.eps)
		logits[t] = linear(t, final[t], head, nil, c.vocab)
	}
	return logits, append(hidden, final)
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// writeCheckpoint writes config.json and model.safetensors for the tensors w
// into a new temporary directory.
func writeCheckpoint(t testing.TB, config map[string]any, w map[string][]float32, shapes map[string][]int) string {
	t.Helper()
	return writeCheckpointAs(t, config, w, shapes, safetensors.F32)
}

// writeCheckpointAs is writeCheckpoint with every tensor stored as dt (F32,
// F16 or BF16: the values rounded to nearest, ties to even).
func writeCheckpointAs(t testing.TB, config map[string]any, w map[string][]float32, shapes map[string][]int, dt safetensors.DType) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for name, data := range w {
		x, err := safetensors.FloatTensor(name, dt, shapes[name], data)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, x)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// archCase is a small random checkpoint of one architecture variant.
type archCase struct {
	name   string
	config map[string]any
	naive  naiveCfg
}

func archCases() []archCase {
	base := func(mt string) map[string]any {
		return map[string]any{
			"architectures": []string{map[string]string{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
				"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[mt]}, "model_type": mt, "hidden_size": 48, "intermediate_size": 80,
			"num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 16,
			"hidden_act": "silu", "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
			"vocab_size": 97, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
		}
	}
	nb := naiveCfg{h: 48, inter: 80, layers: 3, heads: 6, kvHeads: 2, hd: 16, vocab: 97, eps: 1e-6, theta: 10000}

	qwen2 := base("qwen2")
	qwen2["tie_word_embeddings"] = true
	qwen2["rope_theta"] = 1000000.0
	n2 := nb
	n2.theta, n2.qkvBias, n2.tied = 1e6, true, true

	qwen3 := base("qwen3")
	qwen3["attention_bias"] = false
	n3 := nb
	n3.qkNorm = true

	llama3 := base("llama")
	llama3["attention_bias"] = true
	llama3["rope_theta"] = 500000.0
	llama3["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
	nl := nb
	nl.theta, nl.ropeType, nl.factor, nl.lowFF, nl.highFF, nl.origMax = 5e5, "llama3", 8, 1, 4, 64
	nl.qkvBias, nl.oBias = true, true

	mistral := base("mistral")
	mistral["rope_scaling"] = map[string]any{"type": "linear", "factor": 2.0}
	mistral["num_key_value_heads"] = 6
	nm := nb
	nm.kvHeads, nm.ropeType, nm.factor = 6, "linear", 2
	return []archCase{{"qwen2-bias-tied", qwen2, n2}, {"qwen3-qknorm", qwen3, n3}, {"llama3-rope-bias", llama3, nl}, {"mistral-linear-mha", mistral, nm}}
}

// buildCase writes a random checkpoint for c, loads it with Load and returns
// the model and the raw weights.
func buildCase(t testing.TB, c archCase, seed uint64) (*Model, map[string][]float32) {
	t.Helper()
	return buildCaseAs(t, c, seed, safetensors.F32)
}

// buildCaseAs is buildCase with the checkpoint's tensors stored as dt; the
// weights it returns are the values the file holds (16-bit ones widened
// exactly).
func buildCaseAs(t testing.TB, c archCase, seed uint64, dt safetensors.DType) (*Model, map[string][]float32) {
	t.Helper()
	// Draw the weights with NewRandom's generator on the parsed config, then go
	// through the files and Load like a real checkpoint.
	cfgDir := t.TempDir()
	b, _ := json.Marshal(c.config)
	if err := os.WriteFile(filepath.Join(cfgDir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := checkpoint.LoadConfig(filepath.Join(cfgDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	w, shapes, err := RandomWeights(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	// Scale up the random weights so attention is far from uniform and every
	// term matters in the comparison.
	for name, v := range w {
		if !strings.HasSuffix(name, "norm.weight") {
			for i := range v {
				v[i] *= 8
			}
		}
	}
	dir := writeCheckpointAs(t, c.config, w, shapes, dt)
	if dt != safetensors.F32 {
		w, _ = readWeights(t, dir)
	}
	m, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, w
}

// TestAgainstNaive compares prefill and cached decode, logits and every
// hidden state, with the float64 implementation for each architecture variant.
func TestAgainstNaive(t *testing.T) {
	tokens := []int{1, 17, 42, 5, 96, 3, 3, 60, 11, 0, 88, 23, 7, 50, 31, 64, 2, 19, 45, 70}
	for _, c := range archCases() {
		t.Run(c.name, func(t *testing.T) {
			m, w := buildCase(t, c, 7)
			wantLogits, wantHidden := naiveForward(c.naive, w, tokens)
			L := m.NumLayers()
			taps := make([]int, L+1)
			for k := range taps {
				taps[k] = k
			}
			// One prefill of everything (backend attention path), all logits.
			seq, err := m.NewSequence(len(tokens))
			if err != nil {
				t.Fatal(err)
			}
			res, err := m.Forward([]Input{{Seq: seq, Tokens: tokens, Logits: LogitsAll}}, Options{Taps: taps})
			if err != nil {
				t.Fatal(err)
			}
			const tol = 2e-4
			var scale float64
			for p := range tokens {
				for _, v := range wantLogits[p] {
					scale = math.Max(scale, math.Abs(v))
				}
				if d := maxAbsDiff32(res.LogitsOf(0)[p*m.VocabSize():(p+1)*m.VocabSize()], wantLogits[p]); d > tol {
					t.Fatalf("prefill logits at position %d differ by %g", p, d)
				}
				for k := 0; k <= L; k++ {
					h := res.HiddenOf(k, 0)[p*m.HiddenSize() : (p+1)*m.HiddenSize()]
					if d := maxAbsDiff32(h, wantHidden[k][p]); d > tol {
						t.Fatalf("hidden_states[%d] at position %d differs by %g", k, p, d)
					}
				}
			}
			if scale < 1 {
				t.Fatalf("logits too small (max |logit| %g) for a meaningful comparison", scale)
			}
			// Two prompt tokens, then cached decode (direct attention path).
			seq.Reset()
			in := []Input{{Seq: seq, Tokens: tokens[:2]}}
			for p := 1; p < len(tokens); p++ {
				res, err := m.Forward(in, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff32(res.LogitsOf(0), wantLogits[p]); d > tol {
					t.Fatalf("decode logits at position %d differ by %g", p, d)
				}
				if p+1 < len(tokens) {
					in[0].Tokens = tokens[p+1 : p+2]
				}
			}
		})
	}
}
