package tensortest

import (
	"fmt"
	"math"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// lkForms are the LK losses the suite checks: each form alone and a
// combination of all four with another η.
var lkForms = []struct {
	name string
	l    tensor.LK
}{
	{"KL", tensor.LK{KL: 1}},
	{"TV", tensor.LK{TV: 1}},
	{"NLA", tensor.LK{NLA: 1}},
	{"Hybrid", tensor.LK{Hybrid: 1, Eta: 3}},
	{"combination", tensor.LK{KL: 0.1, TV: 0.9, NLA: 0.3, Hybrid: 0.5, Eta: 1.5}},
}

// lkRowRef returns one row's LK loss l, its α and its gradient with respect
// to the logits z, all in float64, for the target distribution p (any
// non-negative values). λ is lam when lam >= 0 (held fixed, as a
// finite-difference check of a detached λ needs), else exp(-η·α); the λ
// used is returned.
func lkRowRef(z, p []float64, l tensor.LK, lam float64) (loss, alpha float64, grad []float64, lamUsed float64) {
	n := len(z)
	m := math.Inf(-1)
	for _, v := range z {
		m = math.Max(m, v)
	}
	var sum float64
	for _, v := range z {
		sum += math.Exp(v - m)
	}
	logZ := m + math.Log(sum)
	q := make([]float64, n)
	var kl, psum, share float64
	for j := range z {
		q[j] = math.Exp(z[j] - logZ)
		alpha += math.Min(p[j], q[j])
		psum += p[j]
		if p[j] > 0 {
			kl += p[j] * (math.Log(p[j]) - (z[j] - logZ))
		}
	}
	// s_j: dα/dq_j (1 where q < p, 0 where q > p, half on a tie).
	s := make([]float64, n)
	for j := range z {
		switch {
		case q[j] < p[j]:
			s[j] = 1
		case q[j] == p[j]:
			s[j] = 0.5
		}
		share += q[j] * s[j]
	}
	lamUsed = lam
	if lam < 0 {
		lamUsed = math.Exp(-l.Eta * alpha)
	}
	tv := 1 - alpha
	var cK, cT float64
	if l.KL != 0 {
		loss += l.KL * kl
		cK += l.KL
	}
	if l.TV != 0 {
		loss += l.TV * tv
		cT += l.TV
	}
	if l.NLA != 0 {
		loss -= l.NLA * math.Log(math.Max(alpha, tensor.LKEpsilon))
		if alpha >= tensor.LKEpsilon {
			cT += l.NLA / alpha
		}
	}
	if l.Hybrid != 0 {
		loss += l.Hybrid * (lamUsed*kl + (1-lamUsed)*tv)
		cK += l.Hybrid * lamUsed
		cT += l.Hybrid * (1 - lamUsed)
	}
	grad = make([]float64, n)
	for j := range z {
		// dKL/dz_j = q_j·Σp - p_j; d(-α)/dz_j = q_j·(S - s_j).
		grad[j] = cK*(q[j]*psum-p[j]) + cT*q[j]*(share-s[j])
	}
	return loss, alpha, grad, lamUsed
}

// lkRef returns LKLoss's weighted loss, weighted α and gradient in float64
// (p nil: one-hot targets, rows with a negative one skipped), and each
// gradient value's tolerance scale: NLA's gradient is TV's over α, and so
// is its float32 rounding.
func lkRef(logits []float32, p []float32, targets []int32, rows, v int, weights []float32, l tensor.LK) (loss, alpha float64, grad, scale []float64) {
	grad, scale = make([]float64, rows*v), make([]float64, rows*v)
	z, pr := make([]float64, v), make([]float64, v)
	for r := 0; r < rows; r++ {
		w := 1.0
		if weights != nil {
			w = float64(weights[r])
		}
		for j := range z {
			z[j] = float64(logits[r*v+j])
			if p != nil {
				pr[j] = float64(p[r*v+j])
			} else {
				pr[j] = 0
				if int32(j) == targets[r] {
					pr[j] = 1
				}
			}
		}
		if w == 0 || p == nil && targets[r] < 0 {
			for j := range z {
				scale[r*v+j] = 0.05
			}
			continue
		}
		lr, ar, g, _ := lkRowRef(z, pr, l, -1)
		loss += w * lr
		alpha += w * ar
		s := 0.05 * math.Max(1, w*(l.KL+l.TV+l.Hybrid+l.NLA/math.Max(ar, tensor.LKEpsilon)))
		for j := range g {
			grad[r*v+j] = w * g[j]
			scale[r*v+j] = s
		}
	}
	return loss, alpha, grad, scale
}

// lkFiniteDifferences checks lkRowRef's gradient against central finite
// differences of its loss in float64, λ held at the unperturbed row's (it
// is detached), on every row of logits.
func lkFiniteDifferences(t *testing.T, name string, logits []float32, p []float64, rows, v int, l tensor.LK) {
	t.Helper()
	const h = 1e-6
	z, pr := make([]float64, v), make([]float64, v)
	for r := 0; r < rows; r++ {
		for j := range z {
			z[j] = float64(logits[r*v+j])
		}
		copy(pr, p[r*v:r*v+v])
		_, _, g, lam := lkRowRef(z, pr, l, -1)
		for j := range z {
			z0 := z[j]
			z[j] = z0 + h
			up, _, _, _ := lkRowRef(z, pr, l, lam)
			z[j] = z0 - h
			down, _, _, _ := lkRowRef(z, pr, l, lam)
			z[j] = z0
			fd := (up - down) / (2 * h)
			if d := math.Abs(fd - g[j]); !(d <= 1e-6*math.Max(1, math.Abs(g[j]))) {
				t.Fatalf("%s: row %d column %d: gradient %.12g, finite differences %.12g", name, r, j, g[j], fd)
			}
		}
	}
}

// lkDistributions returns rows random target distributions over v columns:
// row 2's sums to 0.7 (a draft vocabulary's share of the target), row 1
// has zeros, row 4 is nearly one-hot, the rest sum to 1.
func (e *env) lkDistributions(rows, v int) []float32 {
	p := make([]float32, rows*v)
	for r := 0; r < rows; r++ {
		var s float32
		for j := 0; j < v; j++ {
			p[r*v+j] = e.r.Float32()
			if r == 4 && j != 3 {
				p[r*v+j] *= 1e-3
			}
			s += p[r*v+j]
		}
		total := float32(1)
		if r == 2 {
			total = 0.7
		}
		for j := 0; j < v; j++ {
			p[r*v+j] *= total / s
		}
	}
	for j := 0; j < v; j += 3 {
		p[v+j] = 0
	}
	return p
}

// lkLoss checks LKLoss and LKLossHard against the float64 reference, whose
// gradient is itself checked by finite differences, for every form: the
// loss, α, the gradient overwriting what dlogits held, the same bits
// without a gradient and in place, and skipped rows.
func lkLoss(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 29)
	for _, sh := range [][2]int{{6, 11}, {700, 90}} { // the second split over the workers
		rows, v := sh[0], sh[1]
		lv := e.rand(rows*v, 2)
		p := e.lkDistributions(rows, v)
		w := make([]float32, rows)
		for r := range w {
			w[r] = 0.2 + e.r.Float32()
		}
		w[3] = 0 // skipped
		logits, pt, wt := e.tensor(lv, rows, v), e.tensor(p, rows, v), e.tensor(w, rows, 1)
		for _, f := range lkForms {
			name := fmt.Sprintf("LKLoss %s %dx%d", f.name, rows, v)
			if rows < 10 {
				p64 := make([]float64, len(p))
				for i, x := range p {
					p64[i] = float64(x)
				}
				lkFiniteDifferences(t, name, lv, p64, rows, v, f.l)
			}
			want, wantAlpha, wantGrad, scale := lkRef(lv, p, nil, rows, v, w, f.l)
			e.lkCall(name, lv, logits, rows, v, want, wantAlpha, wantGrad, scale, func(d, in tensor.Tensor) (float64, float64) {
				return dev.LKLoss(d, in, pt, wt, f.l)
			})
		}
	}
	// Without weights every row weighs 1; with p one-hot LKLoss is
	// LKLossHard.
	rows, v := 3, 4
	lv, p := e.rand(rows*v, 1), []float32{1, 0, 0, 0, 0, 0.5, 0.5, 0, 0, 0, 1, 0}
	hard := e.i32([]int32{0, -1, 2})
	for _, f := range lkForms {
		want, wantAlpha, _, _ := lkRef(lv, p, nil, rows, v, nil, f.l)
		got, alpha := dev.LKLoss(tensor.Tensor{}, e.tensor(lv, rows, v), e.tensor(p, rows, v), tensor.Tensor{}, f.l)
		e.closeTo("LKLoss without weights "+f.name, got, want, 1e-6)
		e.closeTo("LKLoss without weights "+f.name+" α", alpha, wantAlpha, 1e-6)
		// Row 1 (target -1) is skipped by LKLossHard: the one-hot rows 0
		// and 2 only.
		w := []float32{1, 0, 1}
		want, wantAlpha, _, _ = lkRef(lv, p, nil, rows, v, w, f.l)
		got, alpha = dev.LKLossHard(tensor.Tensor{}, e.tensor(lv, rows, v), hard, tensor.Tensor{}, f.l)
		e.closeTo("LKLossHard against one-hot LKLoss "+f.name, got, want, 1e-6)
		e.closeTo("LKLossHard against one-hot LKLoss "+f.name+" α", alpha, wantAlpha, 1e-6)
	}
	lkLossHard(t, dev)
}

// lkCall checks one LK loss call, call(dlogits, logits), against the
// reference's loss, α and gradient: into a separate gradient tensor with
// the logits (lv in logits) left as they are, without a gradient (the same
// loss and α), and in place (the same gradient).
func (e *env) lkCall(name string, lv []float32, logits tensor.Tensor, rows, v int, want, wantAlpha float64, wantGrad, scale []float64, call func(d, in tensor.Tensor) (float64, float64)) {
	d := e.tensor(e.rand(rows*v, 1), rows, v)
	got, alpha := call(d, logits)
	e.closeTo(name, got, want, 1e-6)
	e.closeTo(name+" α", alpha, wantAlpha, 1e-6)
	e.near(name+" dlogits", e.read(d), wantGrad, scale)
	e.same(name+"'s logits", e.read(logits), lv)
	if l, a := call(tensor.Tensor{}, logits); l != got || a != alpha {
		e.t.Fatalf("%s without dlogits %v α %v, with %v α %v", name, l, a, got, alpha)
	}
	in := e.tensor(lv, rows, v)
	if l, a := call(in, in); l != got || a != alpha {
		e.t.Fatalf("%s in place %v α %v, into a separate tensor %v α %v", name, l, a, got, alpha)
	}
	e.same(name+" in place", e.read(in), e.read(d))
}

// lkLossHard checks LKLossHard against the reference: negative targets and
// zero weights skipped, a row the draft cannot accept (α below NLA's
// floor), and the gradient checked by finite differences on a few rows.
func lkLossHard(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 30)
	for _, sh := range [][2]int{{7, 13}, {1000, 300}} {
		rows, v := sh[0], sh[1]
		lv := e.rand(rows*v, 2)
		tg := make([]int32, rows)
		for r := range tg {
			tg[r] = max(int32(e.r.IntN(v+5))-5, -1)
		}
		tg[0], tg[1], tg[2] = 4, -1, 6
		lv[2*v+6] = -40 // α = q_t far below LKEpsilon: NLA is constant there
		w := make([]float32, rows)
		for r := range w {
			w[r] = 0.2 + e.r.Float32()
		}
		w[3] = 0
		logits, targets, wt := e.tensor(lv, rows, v), e.i32(tg), e.tensor(w, rows, 1)
		for _, f := range lkForms {
			name := fmt.Sprintf("LKLossHard %s %dx%d", f.name, rows, v)
			if rows < 10 {
				p64 := make([]float64, rows*v)
				for r, c := range tg {
					if c >= 0 {
						p64[r*v+int(c)] = 1
					}
				}
				lkFiniteDifferences(t, name, lv, p64, rows, v, f.l)
			}
			want, wantAlpha, wantGrad, scale := lkRef(lv, nil, tg, rows, v, w, f.l)
			e.lkCall(name, lv, logits, rows, v, want, wantAlpha, wantGrad, scale, func(d, in tensor.Tensor) (float64, float64) {
				return dev.LKLossHard(d, in, targets, wt, f.l)
			})
		}
	}
	// KL against one-hot targets is the cross-entropy, gradient included.
	rows, v := 40, 70
	lv := e.rand(rows*v, 2)
	tg := make([]int32, rows)
	for r := range tg {
		tg[r] = int32(e.r.IntN(v))
	}
	logits, targets := e.tensor(lv, rows, v), e.i32(tg)
	dk, dc := e.tensor(make([]float32, rows*v), rows, v), e.tensor(make([]float32, rows*v), rows, v)
	kl, _ := dev.LKLossHard(dk, logits, targets, tensor.Tensor{}, tensor.LK{KL: 1})
	ce := dev.CrossEntropy(dc, logits, targets, tensor.Tensor{})
	e.closeTo("LKLossHard KL against CrossEntropy", kl, ce, 1e-6)
	ceGrad := make([]float64, rows*v)
	for i, g := range e.read(dc) {
		ceGrad[i] = float64(g)
	}
	e.near("LKLossHard KL's gradient against CrossEntropy's", e.read(dk), ceGrad, gradTol(rows*v))
}
