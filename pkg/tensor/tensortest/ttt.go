package tensortest

import (
	"fmt"
	"math"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// tttGradTol is the tolerance of AttendTTTBackward's gradients against central
// finite differences of the float64 reference (step 1e-4, whose truncation
// and rounding errors are below 1e-9), relative to the largest gradient of
// the same tensor: the CPU device's float32 rounding stays near 1e-7 of it
// (the softmax's dS = P(dP - D) cancels partly), while a missing or
// misplaced term is of the size of a typical gradient.
const tttGradTol = 2e-5

// tttCase is one random training-time-test attention problem: packed
// sequences of different lengths with a row between two of them that no
// sequence covers, and every step's keys and values.
type tttCase struct {
	shape      tensor.AttnShape
	seqs       []tensor.Span
	rows       int
	scale      float64   // 1/√HeadDim
	q          []float64 // [rows, Heads·HeadDim]
	keys, vals [][]float64
}

// ttt checks AttendTTT against a float64 reference and AttendTTTBackward
// against central finite differences of the reference's loss sum(out·R), at
// steps k = 0, 1, 2 of an unroll, with grouped-query heads.
func ttt(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 10)
	c := tttCase{shape: tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 16},
		seqs: []tensor.Span{{Start: 0, N: 5}, {Start: 5, N: 1}, {Start: 7, N: 11}, {Start: 18, N: 7}}, rows: 25}
	c.scale = 1 / math.Sqrt(float64(c.shape.HeadDim))
	qd, kd := c.shape.Heads*c.shape.HeadDim, c.shape.KVHeads*c.shape.HeadDim
	const steps = 3
	var keys, vals []tensor.Tensor
	for range steps {
		kv, vv := e.rand(c.rows*kd, 1), e.rand(c.rows*kd, 1)
		keys, vals = append(keys, e.tensor(kv, c.rows, kd)), append(vals, e.tensor(vv, c.rows, kd))
		c.keys, c.vals = append(c.keys, widen(kv)), append(c.vals, widen(vv))
	}
	for k := 0; k < steps; k++ {
		qv := e.rand(c.rows*qd, 1)
		c.q = widen(qv)
		q := e.tensor(qv, c.rows, qd)
		// Rows no sequence covers must keep what they held.
		sentinel := make([]float32, c.rows*qd)
		for i := range sentinel {
			sentinel[i] = 7
		}
		out := e.tensor(sentinel, c.rows, qd)
		lse := e.tensor(sentinel[:c.rows*c.shape.Heads], c.rows, c.shape.Heads)
		dev.AttendTTT(out, lse, q, keys[:k+1], vals[:k+1], c.shape, c.seqs)

		want, wscale := make([]float64, c.rows*qd), make([]float64, c.rows*qd)
		wantL := make([]float64, c.rows*c.shape.Heads)
		for i := range want {
			want[i], wscale[i] = 7, 1
		}
		for i := range wantL {
			wantL[i] = 7
		}
		for _, sp := range c.seqs {
			for i := 0; i < sp.N; i++ {
				for h := 0; h < c.shape.Heads; h++ {
					o := (sp.Start+i)*qd + h*c.shape.HeadDim
					wantL[(sp.Start+i)*c.shape.Heads+h] = c.row(sp, i, h, k, want[o:o+c.shape.HeadDim], wscale[o:o+c.shape.HeadDim])
				}
			}
		}
		e.near(fmt.Sprintf("AttendTTT step %d out", k), e.read(out), want, wscale)
		e.near(fmt.Sprintf("AttendTTT step %d lse", k), e.read(lse), wantL, nil)

		// The backward adds to what the gradients hold: start them random.
		dout := e.rand(c.rows*qd, 1)
		dq0 := e.rand(c.rows*qd, 0.1)
		dq := e.tensor(dq0, c.rows, qd)
		var dkeys, dvals []tensor.Tensor
		var dk0, dv0 [][]float32
		for range k + 1 {
			a, b := e.rand(c.rows*kd, 0.1), e.rand(c.rows*kd, 0.1)
			dk0, dv0 = append(dk0, a), append(dv0, b)
			dkeys, dvals = append(dkeys, e.tensor(a, c.rows, kd)), append(dvals, e.tensor(b, c.rows, kd))
		}
		dev.AttendTTTBackward(dq, dkeys, dvals, e.tensor(dout, c.rows, qd), out, lse, q, keys[:k+1], vals[:k+1], c.shape, c.seqs)
		w := widen(dout)
		e.grad(fmt.Sprintf("AttendTTTBackward step %d dq", k), e.read(dq), dq0, c.finiteDiff(c.q, qd, k, w))
		for m := 0; m <= k; m++ {
			e.grad(fmt.Sprintf("AttendTTTBackward step %d dkeys[%d]", k, m), e.read(dkeys[m]), dk0[m], c.finiteDiff(c.keys[m], kd, k, w))
			e.grad(fmt.Sprintf("AttendTTTBackward step %d dvals[%d]", k, m), e.read(dvals[m]), dv0[m], c.finiteDiff(c.vals[m], kd, k, w))
		}
	}
}

func widen(v []float32) []float64 {
	w := make([]float64, len(v))
	for i, x := range v {
		w[i] = float64(x)
	}
	return w
}

// row computes, in float64, step k's attention output of row i of sp at
// query head h into out [HeadDim] (and, when mag is not nil, the sum of the
// magnitudes of its terms into mag, the scale of its rounding), and returns
// the row's log-sum-exp: softmax over the scaled scores against the step-0
// keys of positions <= i and the row's own keys of steps 1..k, then the
// probabilities' sum of the matching values.
func (c *tttCase) row(sp tensor.Span, i, h, k int, out, mag []float64) float64 {
	hd := c.shape.HeadDim
	qd, kd := c.shape.Heads*hd, c.shape.KVHeads*hd
	off := h / (c.shape.Heads / c.shape.KVHeads) * hd
	r := sp.Start + i
	qv := c.q[r*qd+h*hd : r*qd+h*hd+hd]
	// Key j < i+1 is step 0's at row sp.Start+j; key i+m is step m's at r.
	key := func(j int) (kv, vv []float64) {
		m, kr := 0, sp.Start+j
		if j > i {
			m, kr = j-i, r
		}
		return c.keys[m][kr*kd+off : kr*kd+off+hd], c.vals[m][kr*kd+off : kr*kd+off+hd]
	}
	n := i + 1 + k
	var sc [64]float64 // i+1+k is at most the longest sequence plus the steps
	mx := math.Inf(-1)
	for j := range n {
		kv, _ := key(j)
		var s float64
		for d := range hd {
			s += qv[d] * kv[d]
		}
		sc[j] = c.scale * s
		mx = math.Max(mx, sc[j])
	}
	var sum float64
	for j := range n {
		sc[j] = math.Exp(sc[j] - mx)
		sum += sc[j]
	}
	clear(out)
	for j := range n {
		_, vv := key(j)
		for d := range hd {
			p := sc[j] / sum * vv[d]
			out[d] += p
			if mag != nil {
				mag[d] += math.Abs(p)
			}
		}
	}
	for d := range mag {
		mag[d] = math.Max(mag[d], 1e-3)
	}
	return mx + math.Log(sum)
}

// loss returns sum(out·w) over sequence sp's rows at step k, in float64.
func (c *tttCase) loss(sp tensor.Span, k int, w []float64) float64 {
	hd := c.shape.HeadDim
	qd := c.shape.Heads * hd
	var o [64]float64
	var l float64
	for i := 0; i < sp.N; i++ {
		for h := 0; h < c.shape.Heads; h++ {
			c.row(sp, i, h, k, o[:hd], nil)
			base := (sp.Start+i)*qd + h*hd
			for d := range hd {
				l += o[d] * w[base+d]
			}
		}
	}
	return l
}

// finiteDiff returns the central differences of the loss sum(out·w) at
// step k with respect to every value of x (c.q or one step's keys or
// values, of width cols), each perturbed in place and restored: a value of
// row r changes only the outputs of r's sequence, whose loss alone is
// recomputed; rows outside every sequence get 0.
func (c *tttCase) finiteDiff(x []float64, cols, k int, w []float64) []float64 {
	const eps = 1e-4
	g := make([]float64, len(x))
	for _, sp := range c.seqs {
		for i := sp.Start * cols; i < (sp.Start+sp.N)*cols; i++ {
			v := x[i]
			x[i] = v + eps
			up := c.loss(sp, k, w)
			x[i] = v - eps
			down := c.loss(sp, k, w)
			x[i] = v
			g[i] = (up - down) / (2 * eps)
		}
	}
	return g
}

// grad fails unless got - before (a gradient accumulated onto before) is
// within tttGradTol of want, relative to want's largest magnitude.
func (e *env) grad(what string, got, before []float32, want []float64) {
	e.t.Helper()
	var top float64
	for _, x := range want {
		top = math.Max(top, math.Abs(x))
	}
	for i, g := range got {
		d := math.Abs(float64(g) - float64(before[i]) - want[i])
		if !(d <= tttGradTol*top) {
			e.t.Fatalf("%s: value %d is %v + %v, want + %v (difference %.3g, allowed %.3g)", what, i, before[i], float64(g)-float64(before[i]), want[i], d, tttGradTol*top)
		}
	}
}
