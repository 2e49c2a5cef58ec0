package dspark

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/drafters/dspark"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/pkg/tensor/tensortest"
)

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// headsRef is DSpark's output side in float64, written from the method's
// definition (methods.md §4), not from the Go layers: o [R,Hd] through the
// frozen lm_head [V,Hd] plus the Markov bias W2·W1[prev], the confidence
// head on [o ; W1[prev]] (or o), and the combined loss with α* supplied
// (detached: the finite differences must hold it constant).
type headsRef struct {
	R, Hd, V, r         int
	head                []float64
	prev, labels        []int32
	pT                  []float64
	w                   []float64
	withMarkov, useConf bool
	lw                  LossWeights
}

// eval returns the loss and each row's α = 1 - ½ L1.
func (h *headsRef) eval(o, w1, w2, wc, bc []float64, alphaStar []float64) (float64, []float64) {
	var wsum float64
	for _, v := range h.w {
		wsum += v
	}
	alpha := make([]float64, h.R)
	var L float64
	for i := 0; i < h.R; i++ {
		if h.w[i] == 0 {
			continue // no term (a label past the end is -1)
		}
		logits := make([]float64, h.V)
		e := w1[int(h.prev[i])*h.r : (int(h.prev[i])+1)*h.r]
		mx := math.Inf(-1)
		for v := 0; v < h.V; v++ {
			var s float64
			for j := 0; j < h.Hd; j++ {
				s += o[i*h.Hd+j] * h.head[v*h.Hd+j]
			}
			for j := 0; j < h.r; j++ {
				s += w2[v*h.r+j] * e[j]
			}
			logits[v] = s
			mx = math.Max(mx, s)
		}
		var z float64
		for _, x := range logits {
			z += math.Exp(x - mx)
		}
		var l1 float64
		for v, x := range logits {
			l1 += math.Abs(math.Exp(x-mx)/z - h.pT[i*h.V+v])
		}
		ce := -(logits[h.labels[i]] - mx - math.Log(z))
		alpha[i] = 1 - l1/2
		wr := h.w[i] / wsum
		L += wr * (h.lw.CE*ce + h.lw.L1*l1)
		if !h.useConf {
			continue
		}
		c := bc[0]
		for j := 0; j < h.Hd; j++ {
			c += wc[j] * o[i*h.Hd+j]
		}
		if h.withMarkov {
			for j := 0; j < h.r; j++ {
				c += wc[h.Hd+j] * e[j]
			}
		}
		a := math.Min(math.Max(alphaStar[i], 0), 1)
		L += wr * h.lw.Confidence * (math.Log1p(math.Exp(c)) - a*c)
	}
	return L, alpha
}

// The Markov head, the confidence head and the combined loss, forward and
// backward, against float64 finite differences of headsRef: the gradients
// at the backbone output o, W1, W2 and the confidence projection, with
// repeated prev tokens (W1's scatter adds up) and a zero-weight row.
func TestHeadsAndLossGradients(t *testing.T) {
	for _, withMarkov := range []bool{true, false} {
		rng := rand.New(rand.NewPCG(3, 4))
		dev := cpu.New(cpu.PureGo())
		R, Hd, V, r := 6, 5, 11, 3
		o := testutil.RandNormal(rng, R*Hd, 1)
		head := testutil.RandNormal(rng, V*Hd, 0.7)
		w1 := testutil.RandNormal(rng, V*r, 1)
		w2 := testutil.RandNormal(rng, V*r, 0.7)
		cin := Hd
		if withMarkov {
			cin += r
		}
		wc := testutil.RandNormal(rng, cin, 0.5)
		bc := testutil.RandNormal(rng, 1, 0.5)
		prev := []int32{2, 7, 2, 0, 10, 7}
		labels := []int32{1, 4, 9, 3, 3, 0}
		w := []float32{1, 0.8, 0, 0.5, 0.25, 1}
		pT := make([]float32, R*V)
		for i := 0; i < R; i++ {
			var z float64
			row := testutil.RandNormal(rng, V, 1.5)
			for v := range row {
				z += math.Exp(float64(row[v]))
			}
			for v := range row {
				pT[i*V+v] = float32(math.Exp(float64(row[v])) / z)
			}
		}
		lw := DefaultLossWeights()

		// Go forward.
		host := func(v []float32, rows, cols int) tensor.Tensor { return cpu.HostTensor(v, rows, cols) }
		m := &dspark.Markov{W1: host(w1, V, r), W2: host(w2, V, r)}
		proj, err := nn.NewLinear(dev, tensor.F32Matrix(wc, 1, cin), bc)
		if err != nil {
			t.Fatal(err)
		}
		ch := &dspark.Confidence{Proj: proj, WithMarkov: withMarkov}
		acts, sc, err := ch.NewActs(dev, R, Hd, r, true)
		if err != nil {
			t.Fatal(err)
		}
		logits, e, conf := make([]float32, R*V), make([]float32, R*r), make([]float32, R)
		dev.MatMul(host(logits, R, V), host(o, R, Hd), host(head, V, Hd), false, true, 1, false)
		m.Forward(dev, host(logits, R, V), host(e, R, r), prev)
		ch.Forward(dev, host(conf, R, 1), host(o, R, Hd), host(e, R, r), acts)
		ls, err := newLoss(dev, lw, R, V, true)
		if err != nil {
			t.Fatal(err)
		}
		dlogits, dconf := make([]float32, R*V), make([]float32, R)
		st := ls.forward(dev, host(dlogits, R, V), host(dconf, R, 1), host(logits, R, V), host(conf, R, 1), host(pT, R, V), labels, w, 0)

		ref := &headsRef{R: R, Hd: Hd, V: V, r: r, head: to64(head), prev: prev, labels: labels, pT: to64(pT), w: to64(w), withMarkov: withMarkov, useConf: true, lw: lw}
		o64, w164, w264, wc64, bc64 := to64(o), to64(w1), to64(w2), to64(wc), to64(bc)
		_, alpha := ref.eval(o64, w164, w264, wc64, bc64, make([]float64, R))
		want, _ := ref.eval(o64, w164, w264, wc64, bc64, alpha)
		if math.Abs(st.Loss-want) > 1e-5*(1+math.Abs(want)) {
			t.Fatalf("markov %v: loss %.8g, reference %.8g", withMarkov, st.Loss, want)
		}
		for i := range R {
			if w[i] != 0 && math.Abs(ls.alpha[i]-alpha[i]) > 1e-5 {
				t.Fatalf("markov %v: row %d α %.7g, reference %.7g", withMarkov, i, ls.alpha[i], alpha[i])
			}
		}

		// Go backward: do = dlogits·head + the confidence head's share; de
		// from the confidence head, then the Markov head's.
		do, de := make([]float32, R*Hd), make([]float32, R*r)
		dW1, dW2, dWc, dbc := make([]float32, V*r), make([]float32, V*r), make([]float32, cin), make([]float32, 1)
		ones := []float32{1, 1, 1, 1, 1, 1}
		dev.MatMul(host(do, R, Hd), host(dlogits, R, V), host(head, V, Hd), false, false, 1, false)
		ch.Backward(dev, host(do, R, Hd), host(de, R, r), host(dWc, 1, cin), host(dbc, 1, 1), host(dconf, R, 1), host(o, R, Hd), acts, sc)
		m.Backward(dev, host(dW1, V, r), host(dW2, V, r), host(de, R, r), host(dlogits, R, V), host(e, R, r), prev, ones)

		f := func(mod func(v []float64) (o, w1, w2, wc, bc []float64)) func([]float64) float64 {
			return func(v []float64) float64 {
				a, b, c, d, g := mod(v)
				l, _ := ref.eval(a, b, c, d, g, alpha)
				return l
			}
		}
		check := func(what string, got []float32, x []float64, mod func(v []float64) (o, w1, w2, wc, bc []float64)) {
			t.Helper()
			num := tensortest.Gradient(x, f(mod))
			for i := range got {
				if d := math.Abs(float64(got[i]) - num[i]); d > 1e-4*(1+math.Abs(num[i])) {
					t.Fatalf("markov %v: %s[%d] = %.7g, finite differences %.7g", withMarkov, what, i, got[i], num[i])
				}
			}
		}
		check("do", do, o64, func(v []float64) ([]float64, []float64, []float64, []float64, []float64) {
			return v, w164, w264, wc64, bc64
		})
		check("dW1", dW1, w164, func(v []float64) ([]float64, []float64, []float64, []float64, []float64) {
			return o64, v, w264, wc64, bc64
		})
		check("dW2", dW2, w264, func(v []float64) ([]float64, []float64, []float64, []float64, []float64) {
			return o64, w164, v, wc64, bc64
		})
		check("dWc", dWc, wc64, func(v []float64) ([]float64, []float64, []float64, []float64, []float64) {
			return o64, w164, w264, v, bc64
		})
		check("dbc", dbc, bc64, func(v []float64) ([]float64, []float64, []float64, []float64, []float64) {
			return o64, w164, w264, wc64, v
		})
		// The gradients must not be trivially zero where the reference's are not.
		var n float64
		for _, v := range dW1 {
			n += math.Abs(float64(v))
		}
		if n == 0 {
			t.Fatal("dW1 is all zero: the check shows nothing")
		}
	}
}
