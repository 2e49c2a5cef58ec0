package cpu

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// LKLoss is SoftCrossEntropy's fused kernel for the LK losses: the same
// float32 exponentials (stored in dlogits when a gradient is wanted), and
// per row float64 sums of the loss's terms, chunks of rows (ceChunks) split
// over the workers, each chunk's sums added in chunk order.
func (c *Device) LKLoss(dlogits, logits, p, weights tensor.Tensor, l tensor.LK) (loss, alpha float64) {
	if p.DType() != tensor.F32 || p.Rows() != logits.Rows() || p.Cols() != logits.Cols() {
		panic(fmt.Sprintf("tensor: LKLoss: target distributions %s %dx%d for logits %dx%d", p.DType(), p.Rows(), p.Cols(), logits.Rows(), logits.Cols()))
	}
	n := c.loss.setLoss("LKLoss", dlogits, logits, weights)
	c.loss.job.p, c.loss.job.lk = f32s(p), l
	tensor.Parallel(n, 1, c.loss.lkFn)
	return c.loss.lkTotal(n)
}

// LKLossHard is LKLoss with one-hot targets: the same row kernel, whose
// target distribution is then the target's column.
func (c *Device) LKLossHard(dlogits, logits, targets, weights tensor.Tensor, l tensor.LK) (loss, alpha float64) {
	if targets.DType() != tensor.I32 || targets.Len() != logits.Rows() {
		panic(fmt.Sprintf("tensor: LKLossHard: %d %s targets for %d rows", targets.Len(), targets.DType(), logits.Rows()))
	}
	n := c.loss.setLoss("LKLossHard", dlogits, logits, weights)
	c.loss.job.t, c.loss.job.lk = i32s(targets), l
	tensor.Parallel(n, 1, c.loss.lkFn)
	return c.loss.lkTotal(n)
}

// lkTotal returns the sums of the first n chunks' losses and α, in chunk
// order, and clears the job.
func (l *lossOps) lkTotal(n int) (loss, alpha float64) {
	for _, a := range l.job.partialAlpha[:n] {
		alpha += a
	}
	return l.total(n), alpha
}

// lkChunk computes chunks [clo, chi) of LKLoss or LKLossHard (the latter
// when the job has no target distributions).
func (l *lossOps) lkChunk(clo, chi int) {
	j := &l.job
	for c := clo; c < chi; c++ {
		var loss, alpha float64
		for r := c * j.chunk; r < min((c+1)*j.chunk, j.rows); r++ {
			w := j.weight(r)
			if w == 0 || j.p == nil && j.t[r] < 0 {
				j.skip(r)
				continue
			}
			lr, ar := j.lkRow(r, w)
			loss += float64(w) * lr
			alpha += float64(w) * ar
		}
		j.partial[c], j.partialAlpha[c] = loss, alpha
	}
}

// lkShare is TV's gradient share s_j of a column: 1 where q < p (raising q
// raises α), 0 where q > p, LKTie on a tie.
func lkShare(p, q float64) float64 {
	switch {
	case q < p:
		return 1
	case q > p:
		return 0
	}
	return tensor.LKTie
}

// lkRow returns row r's LK loss and α, and writes w·dL/dlogits into the
// row's gradient when one is wanted. With q_j = e_j/Σe and the TV share
// s_j (lkShare),
//
//	dα/dz_i = q_i·(s_i - S),  S = Σ_j q_j·s_j
//	dKL/dz_i = q_i·Σp - p_i
//
// so the row's gradient is cK·(q_i·Σp - p_i) + cT·q_i·(S - s_i), where cK
// is the weight on KL (KL's and Hybrid's λ) and cT the weight on -α (TV's,
// Hybrid's 1-λ, and NLA's 1/α while α >= LKEpsilon, below which NLA is
// constant). The passes: Σp, Σp·log p and Σp·x (before the exponentials may
// overwrite the logits), the exponentials and their sum, then α and S, then
// the gradient.
func (j *lossJob) lkRow(r int, w float32) (loss, alpha float64) {
	v, l := j.v, &j.lk
	row := j.x[r*v : r*v+v]
	var pr []float32
	t := -1
	var psum, plogp, px float64
	if j.p != nil {
		pr = j.p[r*v : r*v+v]
		// Σp·log p is KL's constant, which only the loss's value needs:
		// its logarithms (lkLog's, a fifth of math.Log's cost) would
		// still cost as much as the rest of the row, so TV and NLA skip
		// them.
		needKL := l.KL != 0 || l.Hybrid != 0
		for i, x := range row {
			// A zero p leaves out its column's x, which may be -Inf (a
			// masked logit): 0·-Inf would be NaN.
			if pj := float64(pr[i]); pj != 0 {
				psum += pj
				px += pj * float64(x)
				if needKL {
					plogp += pj * lkLog(pj)
				}
			}
		}
	} else {
		t = int(j.t[r])
		psum, px = 1, float64(row[t])
	}
	mx, sum, d := j.exps(r)
	inv := 1 / sum
	// α and S = Σ q·s (s the TV share, lkShare).
	var share, et float64
	switch {
	case pr == nil:
		// One-hot: α = min(1, q_t), and no other column has q < p.
		if d != nil {
			et = float64(d[t])
		} else {
			et = float64(Expf(row[t] - mx))
		}
		qt := et * inv
		alpha, share = min(1, qt), qt*lkShare(1, qt)
	case d != nil:
		for i, e := range d {
			q, pj := float64(e)*inv, float64(pr[i])
			alpha += min(pj, q)
			share += q * lkShare(pj, q)
		}
	default:
		for i, x := range row { // intact without d: expSum's exponentials again
			q, pj := float64(Expf(x-mx))*inv, float64(pr[i])
			alpha += min(pj, q)
			share += q * lkShare(pj, q)
		}
	}
	kl := plogp - px + psum*(math.Log(sum)+float64(mx))
	tv := 1 - alpha
	var lam float64
	if l.Hybrid != 0 {
		// λ is a constant of the gradient (α detached).
		lam = float64(Expf(float32(-l.Eta * alpha)))
	}
	// A form of weight 0 adds nothing, not 0·Inf (KL of a masked column).
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
		loss -= l.NLA * math.Log(max(alpha, tensor.LKEpsilon))
		if alpha >= tensor.LKEpsilon {
			cT += l.NLA / alpha
		}
	}
	if l.Hybrid != 0 {
		if lam != 0 {
			loss += l.Hybrid * lam * kl
		}
		loss += l.Hybrid * (1 - lam) * tv
		cK += l.Hybrid * lam
		cT += l.Hybrid * (1 - lam)
	}
	if d == nil {
		return loss, alpha
	}
	// w·(cK·(q·Σp - p) + cT·q·(S - s)) = q·(c0 - b·s) - a·p.
	a, b := float64(w)*cK, float64(w)*cT
	c0 := a*psum + b*share
	if pr == nil {
		// Every column but t has p = 0 and s = 0 (or q = 0): q·c0, as
		// CrossEntropy scales its exponentials.
		k := c0 * inv
		for i, e := range d {
			d[i] = float32(float64(e) * k)
		}
		qt := et * inv
		d[t] = float32(qt*(c0-b*lkShare(1, qt)) - a)
		return loss, alpha
	}
	for i, e := range d {
		q, pj := float64(e)*inv, float64(pr[i])
		d[i] = float32(q*(c0-b*lkShare(pj, q)) - a*pj)
	}
	return loss, alpha
}

// lkLogTable holds, for k = 0..255, log(1 + k/256) and 1/(1 + k/256): the
// table lkLog reduces its argument's significand by.
var lkLogTable = func() (t [256][2]float64) {
	for k := range t {
		c := 1 + float64(k)/256
		t[k] = [2]float64{math.Log(c), 1 / c}
	}
	return t
}()

// lkLog returns log x for a positive normal x (a float32 p widened: every
// one is normal as a float64), within 1e-15 of math.Log's value plus a
// few of its ulps, at a fifth of its cost, without a division: x =
// m·2^e with m in [1, 2), m = c·(1+r) with c = 1 + k/256 from m's top
// eight bits, so 0 <= r < 2^-8, and log x = e·ln 2 + log c + log(1+r) by
// its series to r^5 (the next term is below 2^-51).
func lkLog(x float64) float64 {
	b := math.Float64bits(x)
	e := float64(int(b>>52&0x7ff) - 1023)
	t := &lkLogTable[b>>44&0xff]
	m := math.Float64frombits(b&(1<<52-1) | 0x3ff<<52)
	r := m*t[1] - 1
	l1p := r * (1 - r*(1.0/2-r*(1.0/3-r*(1.0/4-r*(1.0/5)))))
	return e*math.Ln2 + (t[0] + l1p)
}
