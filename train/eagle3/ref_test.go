package eagle3

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
)

// This file holds an independent float64 implementation of the unrolled draft
// and its loss, written directly from the EAGLE-3 recipe (the alignment in
// ttt.go's load: step k's row i feeds token i+1+k and learns the target's
// distribution at position i+1+k; no shared code with ttt.go or the draft
// layer beyond the parameter layout), used as the oracle for the gradient
// check and the trainer's forward.

type refParams struct {
	fc, hn, in, q, k, v, o, pn, gate, up, down, norm, lm []float64
	// The EAGLE-3.1 norms before fc: per feature chunk (fc_norm) or over
	// the whole 3H input (norm_before_fc); empty when off.
	fcn [3][]float64
	inn []float64
}

func toRef(p *deagle3.Params) refParams {
	c := func(x []float32) []float64 {
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = float64(v)
		}
		return y
	}
	return refParams{c(p.FC), c(p.HiddenNorm), c(p.InputNorm), c(p.Q), c(p.K), c(p.V), c(p.O), c(p.PostNorm), c(p.Gate), c(p.Up), c(p.Down), c(p.Norm), c(p.LMHead),
		[3][]float64{c(p.FCNorm[0]), c(p.FCNorm[1]), c(p.FCNorm[2])}, c(p.FCInputNorm)}
}

// list returns the tensors in the order of specs().
func (r *refParams) list() [][]float64 {
	l := [][]float64{r.fc, r.hn, r.in, r.q, r.k, r.v, r.o, r.pn, r.gate, r.up, r.down, r.norm, r.lm}
	for _, w := range append(r.fcn[:], r.inn) {
		if len(w) > 0 {
			l = append(l, w)
		}
	}
	return l
}

// refFCInput returns fc's input for the fused feature f [3H]: f itself for
// plain EAGLE-3, each H-wide chunk RMS-normed with its own weight for
// fc_norm, the whole of it RMS-normed for norm_before_fc.
func refFCInput(g deagle3.Geometry, P refParams, f []float64) []float64 {
	H := g.Hidden
	switch {
	case g.FCNorm:
		var out []float64
		for c := 0; c < 3; c++ {
			out = append(out, refRMS(f[c*H:(c+1)*H], P.fcn[c], g.RMSNormEps)...)
		}
		return out
	case g.NormBeforeFC:
		return refRMS(f, P.inn, g.RMSNormEps)
	}
	return f
}

func refLinear(w, x []float64, out, in int) []float64 {
	y := make([]float64, out)
	for o := 0; o < out; o++ {
		var s float64
		for i := 0; i < in; i++ {
			s += w[o*in+i] * x[i]
		}
		y[o] = s
	}
	return y
}

func refRMS(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * r * w[i]
	}
	return y
}

// refRope rotates each head of x (rotate_half convention) by pos*theta^(-2i/d).
func refRope(x []float64, heads, hd int, pos int, theta float64) {
	half := hd / 2
	for h := 0; h < heads; h++ {
		v := x[h*hd : (h+1)*hd]
		for i := 0; i < half; i++ {
			ang := float64(pos) * math.Pow(theta, -float64(2*i)/float64(hd))
			c, s := math.Cos(ang), math.Sin(ang)
			a, b := v[i], v[i+half]
			v[i] = a*c - b*s
			v[i+half] = b*c + a*s
		}
	}
}

// refLoss computes the TTT loss of samples (whole sequences) in float64.
func refLoss(g deagle3.Geometry, steps int, decay, tau float64, P refParams, embed, head []float64, voc *deagle3.Vocab, samples []*dataset.Sample) float64 {
	H, nq, nkv, hd, I, N, V := g.Hidden, g.Heads, g.KVHeads, g.HeadDim, g.Intermediate, g.DraftVocab, g.Vocab
	eps := g.RMSNormEps
	type rowState struct {
		h    []float64
		q    []float64
		ks   [][]float64 // per step
		vs   [][]float64
		dist []float64 // target distribution over the draft vocab at this position
		arg  int       // target full argmax
	}
	lossSum := make([]float64, steps)
	count := make([]int, steps)
	for _, s := range samples {
		n := len(s.Tokens)
		rows := make([]rowState, n)
		for i := 0; i < n; i++ {
			f := make([]float64, 3*H)
			for c := 0; c < 3; c++ {
				for j := 0; j < H; j++ {
					f[c*H+j] = float64(s.Features[c][i*H+j])
				}
			}
			rows[i].h = refLinear(P.fc, refFCInput(g, P, f), H, 3*H)
			fin := make([]float64, H)
			for j := range fin {
				fin[j] = float64(s.Final[i*H+j])
			}
			lg := refLinear(head, fin, V, H)
			best := 0
			for v := range lg {
				if lg[v] > lg[best] {
					best = v
				}
			}
			rows[i].arg = best
			d := make([]float64, N)
			var z float64
			for di, id := range voc.IDs {
				d[di] = math.Exp((lg[id] - lg[voc.IDs[0]]) / tau)
				z += d[di]
			}
			for di := range d {
				d[di] /= z
			}
			rows[i].dist = d
		}
		for k := 0; k < steps; k++ {
			// q, k, v for every row at this step.
			xs := make([][]float64, n)
			for i := 0; i < n; i++ {
				e := make([]float64, H)
				if i+1+k < n {
					id := int(s.Tokens[i+1+k])
					copy(e, embed[id*H:(id+1)*H])
				}
				x := append(refRMS(e, P.in, eps), refRMS(rows[i].h, P.hn, eps)...)
				xs[i] = x
				q := refLinear(P.q, x, nq*hd, 2*H)
				kk := refLinear(P.k, x, nkv*hd, 2*H)
				vv := refLinear(P.v, x, nkv*hd, 2*H)
				refRope(q, nq, hd, i+k, g.RopeTheta)
				refRope(kk, nkv, hd, i+k, g.RopeTheta)
				rows[i].q = q
				rows[i].ks = append(rows[i].ks, kk)
				rows[i].vs = append(rows[i].vs, vv)
			}
			for i := 0; i < n; i++ {
				att := make([]float64, nq*hd)
				for hh := 0; hh < nq; hh++ {
					gk := hh / (nq / nkv)
					qv := rows[i].q[hh*hd : (hh+1)*hd]
					var keys, vals [][]float64
					for j := 0; j <= i; j++ {
						keys = append(keys, rows[j].ks[0][gk*hd:(gk+1)*hd])
						vals = append(vals, rows[j].vs[0][gk*hd:(gk+1)*hd])
					}
					for m := 1; m <= k; m++ {
						keys = append(keys, rows[i].ks[m][gk*hd:(gk+1)*hd])
						vals = append(vals, rows[i].vs[m][gk*hd:(gk+1)*hd])
					}
					sc := make([]float64, len(keys))
					mx := math.Inf(-1)
					for j, kv := range keys {
						var d float64
						for c := range kv {
							d += qv[c] * kv[c]
						}
						sc[j] = d / math.Sqrt(float64(hd))
						mx = math.Max(mx, sc[j])
					}
					var z float64
					for j := range sc {
						sc[j] = math.Exp(sc[j] - mx)
						z += sc[j]
					}
					for j, vv := range vals {
						for c := range vv {
							att[hh*hd+c] += sc[j] / z * vv[c]
						}
					}
				}
				ao := refLinear(P.o, att, H, nq*hd)
				a1 := make([]float64, H)
				for j := range a1 {
					a1[j] = rows[i].h[j] + ao[j]
				}
				n2 := refRMS(a1, P.pn, eps)
				gt := refLinear(P.gate, n2, I, H)
				u := refLinear(P.up, n2, I, H)
				for j := range gt {
					gt[j] = gt[j] / (1 + math.Exp(-gt[j])) * u[j]
				}
				dn := refLinear(P.down, gt, H, I)
				out := make([]float64, H)
				for j := range out {
					out[j] = a1[j] + dn[j]
				}
				rows[i].h = out // next step's hidden (gradients flow: no detach)
				if g.NormOutput {
					// EAGLE-3.1's norm_output: the next step reads the
					// final norm's output, the lm_head's input.
					rows[i].h = refRMS(out, P.norm, eps)
				}
				if i+2+k < n && s.LossMask[i+2+k] && voc.Index[rows[i+1+k].arg] >= 0 {
					lg := refLinear(P.lm, refRMS(out, P.norm, eps), N, H)
					mx := math.Inf(-1)
					for _, v := range lg {
						mx = math.Max(mx, v)
					}
					var z float64
					for _, v := range lg {
						z += math.Exp(v - mx)
					}
					lz := mx + math.Log(z)
					var l float64
					for di, pv := range rows[i+1+k].dist {
						l -= pv * (lg[di] - lz)
					}
					lossSum[k] += l
					count[k]++
				}
			}
		}
	}
	var total float64
	for k := 0; k < steps; k++ {
		if count[k] > 0 {
			total += math.Pow(decay, float64(k)) * lossSum[k] / float64(count[k])
		}
	}
	return total
}

// tinyTarget is a small random "target model" and data drawn from it: tokens
// follow a random Markov chain, features and final states are fixed random
// functions of the current token and position, so the target distribution is
// learnable from the draft's inputs.
type tinyTarget struct {
	g     deagle3.Geometry
	embed []float32
	head  []float32
	trans [][]float64 // Markov transition rows
	tokF  []float32   // [V, 3H] per-token feature
	tokS  []float32   // [V, H] per-token final state
}

func newTinyTarget(seed uint64, g deagle3.Geometry) *tinyTarget {
	r := rand.New(rand.NewPCG(seed, 1))
	H, V := g.Hidden, g.Vocab
	t := &tinyTarget{g: g}
	rnd := func(n int, s float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * s)
		}
		return x
	}
	t.embed = rnd(V*H, 1)
	t.head = rnd(V*H, 1)
	t.tokF = rnd(V*3*H, 1)
	t.tokS = rnd(V*H, 1)
	for v := 0; v < V; v++ {
		row := make([]float64, V)
		var z float64
		for j := range row {
			row[j] = math.Exp(3 * r.NormFloat64())
			z += row[j]
		}
		for j := range row {
			row[j] /= z
		}
		t.trans = append(t.trans, row)
	}
	return t
}

func (t *tinyTarget) samples(seed uint64, count, minLen, maxLen int) []*dataset.Sample {
	r := rand.New(rand.NewPCG(seed, 2))
	H := t.g.Hidden
	var out []*dataset.Sample
	for s := 0; s < count; s++ {
		n := minLen + r.IntN(maxLen-minLen+1)
		smp := &dataset.Sample{Tokens: make([]int32, n), LossMask: make([]bool, n), Final: make([]float32, n*H), Features: make([][]float32, deagle3.Features)}
		for c := range smp.Features {
			smp.Features[c] = make([]float32, n*H)
		}
		tok := r.IntN(t.g.Vocab)
		prompt := 1 + r.IntN(3)
		for i := 0; i < n; i++ {
			smp.Tokens[i] = int32(tok)
			smp.LossMask[i] = i >= prompt
			for c := 0; c < 3; c++ {
				for j := 0; j < H; j++ {
					smp.Features[c][i*H+j] = t.tokF[tok*3*H+c*H+j] + float32(0.1*r.NormFloat64())
				}
			}
			copy(smp.Final[i*H:(i+1)*H], t.tokS[tok*H:(tok+1)*H])
			// next token
			u, acc := r.Float64(), 0.0
			next := t.g.Vocab - 1
			for j, p := range t.trans[tok] {
				acc += p
				if u < acc {
					next = j
					break
				}
			}
			tok = next
		}
		out = append(out, smp)
	}
	return out
}

func tinyGeometry() deagle3.Geometry {
	return deagle3.Geometry{Hidden: 8, Heads: 2, KVHeads: 1, HeadDim: 4, Intermediate: 12, RMSNormEps: 1e-5,
		RopeTheta: 10000, MaxPositions: 64, Vocab: 16, DraftVocab: 10}
}

// buildTiny makes a net over the given samples, with initialised parameters.
func buildTiny(t *testing.T, g deagle3.Geometry, tt *tinyTarget, samples []*dataset.Sample, steps int, tau float64, withGrad bool) (*net, *deagle3.Vocab) {
	t.Helper()
	counts, err := CountResponseTokens(memory(g.Hidden, samples), g.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	voc, err := deagle3.BuildVocab(counts, g.DraftVocab)
	if err != nil {
		t.Fatal(err)
	}
	p := deagle3.NewParams(g)
	initParams(p, g, 7, tt.head, voc)
	rows, maxLen := 0, 0
	for _, s := range samples {
		rows += len(s.Tokens)
		maxLen = max(maxLen, len(s.Tokens))
	}
	n, err := newNet(g, steps, 0.8, cpu.New(nil), p, tt.embed, tt.head, voc, rows, maxLen, withGrad)
	if err != nil {
		t.Fatal(err)
	}
	n.invTau = 1 / tau
	if err := n.load(samples); err != nil {
		t.Fatal(err)
	}
	return n, voc
}

// writeParams writes the net's host parameters n.p (changed by a test) to
// its master weights on the device.
func (t *net) writeParams() { t.layer.Weights().Write(t.dev, t.p, t.g) }

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// TestGradientCheck compares every parameter gradient of the unrolled draft
// (3 steps, GQA, two packed sequences) with central finite differences of the
// independent float64 reference loss, toward the plain target softmax and
// toward a sharpened one (target temperature 0.5), for plain EAGLE-3 and for
// each EAGLE-3.1 norm (fc_norm, norm_before_fc, norm_output, and each norm
// before fc with norm_output).
func TestGradientCheck(t *testing.T) {
	for _, tau := range []float64{1, 0.5} {
		t.Run(fmt.Sprintf("tau=%g", tau), func(t *testing.T) { gradientCheck(t, tau, deagle3.Norms{}) })
	}
	for _, n := range norms31() {
		t.Run(normsName(n), func(t *testing.T) { gradientCheck(t, 1, n) })
	}
}

// norms31 lists the EAGLE-3.1 switch combinations: each norm before fc
// (they exclude each other) with and without norm_output, and norm_output
// alone.
func norms31() []deagle3.Norms {
	return []deagle3.Norms{{FCNorm: true}, {NormBeforeFC: true}, {NormOutput: true},
		{FCNorm: true, NormOutput: true}, {NormBeforeFC: true, NormOutput: true}}
}

// normsName names a switch combination for a subtest.
func normsName(n deagle3.Norms) string {
	var parts []string
	for _, p := range []struct {
		on   bool
		name string
	}{{n.FCNorm, "fc_norm"}, {n.NormBeforeFC, "norm_before_fc"}, {n.NormOutput, "norm_output"}} {
		if p.on {
			parts = append(parts, p.name)
		}
	}
	if parts == nil {
		return "plain"
	}
	return strings.Join(parts, "+")
}

func gradientCheck(t *testing.T, tau float64, norms deagle3.Norms) {
	g := tinyGeometry()
	g.Norms = norms
	tt := newTinyTarget(11, g)
	samples := tt.samples(12, 2, 5, 8)
	// Perturb the parameters away from the symmetric initialisation (norm
	// weights all one) so that every term of the gradient is exercised.
	n, voc := buildTiny(t, g, tt, samples, 3, tau, true)
	r := rand.New(rand.NewPCG(5, 5))
	for i := range n.p.All {
		n.p.All[i] += float32(0.3 * r.NormFloat64())
	}
	n.writeParams()
	loss := n.forward(true)
	n.backward()
	P := toRef(n.p)
	embed, head := f64(tt.embed), f64(tt.head)
	ref := refLoss(g, 3, 0.8, tau, P, embed, head, voc, samples)
	if math.Abs(loss-ref) > 1e-5*math.Abs(ref) {
		t.Fatalf("float32 loss %.9g, float64 reference %.9g", loss, ref)
	}
	for k := 0; k < 3; k++ {
		if n.countK[k] == 0 {
			t.Fatalf("step %d keeps no rows: the check would not exercise it", k)
		}
	}
	ss := n.p.Tensors(g)
	an := deagle3.NewParams(g)
	n.grW.Read(n.dev, an, g)
	var analytic [][]float32
	for _, a := range an.Tensors(g) {
		analytic = append(analytic, a.Data)
	}
	if len(analytic) != len(P.list()) {
		t.Fatalf("%d gradient tensors, %d reference tensors", len(analytic), len(P.list()))
	}
	worst := 0.0
	for ti, w := range P.list() {
		for i := range w {
			orig := w[i]
			const h = 1e-6
			w[i] = orig + h
			lp := refLoss(g, 3, 0.8, tau, P, embed, head, voc, samples)
			w[i] = orig - h
			lm := refLoss(g, 3, 0.8, tau, P, embed, head, voc, samples)
			w[i] = orig
			num := (lp - lm) / (2 * h)
			a := float64(analytic[ti][i])
			err := math.Abs(a-num) / (1e-3 + math.Abs(num))
			worst = math.Max(worst, err)
			if math.Abs(a-num) > 1e-4+2e-3*math.Abs(num) {
				t.Errorf("%s[%d]: analytic %.7g, finite difference %.7g", ss[ti].Name, i, a, num)
			}
		}
	}
	t.Logf("loss %.7g (ref %.7g); worst relative gradient error %.3g over %d parameters", loss, ref, worst, len(n.p.All))
}

// memory wraps test samples as an in-memory dataset.
func memory(h int, samples []*dataset.Sample) *dataset.Memory {
	m := &dataset.Memory{H: h}
	for _, s := range samples {
		m.Samples = append(m.Samples, *s)
	}
	return m
}
