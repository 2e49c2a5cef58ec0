package eagle3

import (
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Span is one packed sequence of a training batch: rows [Start, Start+N).
type Span struct{ Start, N int }

// attnShape is the head layout of the draft attention.
type attnShape struct {
	nq, nkv, hd int
	scale       float32 // 1/sqrt(hd)
}

func newAttnShape(g Geometry) attnShape {
	return attnShape{nq: g.Heads, nkv: g.KVHeads, hd: g.HeadDim, scale: float32(1 / math.Sqrt(float64(g.HeadDim)))}
}

func (a attnShape) qw() int { return a.nq * a.hd }
func (a attnShape) kw() int { return a.nkv * a.hd }

// TTT is the attention of the draft unrolled over several steps for training
// (EAGLE-3's "training-time test"), over a batch of packed sequences (Seqs).
// Step k's keys and values live in Keys[k] and Vals[k], where the layer's
// Acts of that step put them; Step says which step the next Attend or
// AttendBackward runs. It keeps every step's log-sum-exp for the backward
// pass, and its gradients of the keys and values until each step's is
// complete.
type TTT struct {
	// Seqs are the batch's sequences; Step the step to run.
	Seqs []Span
	Step int
	// Keys[k] and Vals[k] hold step k's RoPE'd keys and values, [R, nkv*hd].
	Keys, Vals [][]float32

	a            attnShape
	be           tensor.Backend
	lse          [][]float32 // per step [R, nq]
	dkeys, dvals [][]float32 // per step [R, nkv*hd]
	s, dp, pe    []float32   // n*n, n*n and n*(steps+1) scratch (n: longest sequence)
}

// NewTTT allocates the attention of steps unrolled steps over batches of up
// to maxRows rows in sequences of at most maxLen; withGrad adds what the
// backward pass needs.
func NewTTT(g Geometry, be tensor.Backend, steps, maxRows, maxLen int, withGrad bool) *TTT {
	kw := g.KVDim()
	t := &TTT{a: newAttnShape(g), be: be, s: make([]float32, maxLen*maxLen), pe: make([]float32, maxLen*(steps+1))}
	for range steps {
		t.Keys = append(t.Keys, make([]float32, maxRows*kw))
		t.Vals = append(t.Vals, make([]float32, maxRows*kw))
		t.lse = append(t.lse, make([]float32, maxRows*g.Heads))
		if withGrad {
			t.dkeys = append(t.dkeys, make([]float32, maxRows*kw))
			t.dvals = append(t.dvals, make([]float32, maxRows*kw))
		}
	}
	if withGrad {
		t.dp = make([]float32, maxLen*maxLen)
	}
	return t
}

// Attend implements Attention for step Step, whose keys and values the
// layer wrote into Keys[Step] and Vals[Step] (k and v).
func (t *TTT) Attend(dev tensor.Device, o, q, k, v tensor.Tensor) {
	s := t.Step
	attentionForward(t.be, t.a, host(dev, o), t.lse[s], host(dev, q), t.Keys[:s+1], t.Vals[:s+1], t.Seqs, t.s, t.pe)
}

// host returns x's values on the host.
func host(dev tensor.Device, x tensor.Tensor) []float32 {
	v, ok := dev.HostF32(x)
	if !ok {
		panic("eagle3: the TTT attention needs a device whose memory is the host's")
	}
	return v
}

// ZeroGrad clears the key and value gradients of rows rows before a
// backward pass through the unroll.
func (t *TTT) ZeroGrad(rows int) {
	kw := t.a.kw()
	for k := range t.dkeys {
		clear(t.dkeys[k][:rows*kw])
		clear(t.dvals[k][:rows*kw])
	}
}

// AttendBackward implements AttentionGrad for step Step, the steps after it
// having run theirs: it accumulates the gradient of this step's queries into
// dq and of every step's keys and values up to this one, and returns this
// step's, which are then complete (the later steps added their share).
func (t *TTT) AttendBackward(dev tensor.Device, dq, do, o, q tensor.Tensor) (dk, dv tensor.Tensor) {
	s := t.Step
	rows := q.Rows()
	attentionBackward(t.be, t.a, host(dev, dq), t.dkeys[:s+1], t.dvals[:s+1], host(dev, do), host(dev, o), t.lse[s], host(dev, q), t.Keys[:s+1], t.Vals[:s+1], t.Seqs, t.s, t.dp, t.pe)
	kw := t.a.kw()
	return tensor.HostTensor(t.dkeys[s], rows, kw), tensor.HostTensor(t.dvals[s], rows, kw)
}

// TTT attention. Step k of the unroll has, per row r (sequence position i),
// a query q_k[r]. It attends to the step-0 keys of its sequence at positions
// j <= i (ordinary causal attention over the keys the target's features
// produced) and to the key at the same row r of every later step 1..k (the
// draft's own earlier guesses along this row's chain, ending with itself):
//
//	s_j   = scale * q_k[r] . k_0[j]      j <= i
//	e_m   = scale * q_k[r] . k_m[r]      m = 1..k
//	(P, pe) = softmax over the concatenation (float32, max-subtracted)
//	o     = sum_j P_j v_0[j] + sum_m pe_m v_m[r]
//
// This is exactly what the engines compute at inference, where the step-0 keys
// are the committed context in the draft's KV cache and the step-m keys are the
// chain's earlier draft tokens. The backward recomputes P from the stored
// log-sum-exp instead of keeping n^2 probabilities per head and step.
//
// keys[m] and vals[m] hold step m's (RoPE'd) keys and values, [R, nkv*hd];
// len(keys) = k+1. S is an n*n scratch, pe an n*(k+1) scratch (maximum sequence
// length n).
func attentionForward(be tensor.Backend, a attnShape, out, lse, q []float32, keys, vals [][]float32, seqs []Span, S, pe []float32) {
	qw, kw, hd := a.qw(), a.kw(), a.hd
	k := len(keys) - 1
	group := a.nq / a.nkv
	for _, sp := range seqs {
		n := sp.N
		for h := 0; h < a.nq; h++ {
			g := h / group
			qh := q[sp.Start*qw+h*hd:]
			k0 := keys[0][sp.Start*kw+g*hd:]
			v0 := vals[0][sp.Start*kw+g*hd:]
			oh := out[sp.Start*qw+h*hd:]
			be.Sgemm(false, true, n, n, hd, a.scale, qh, qw, k0, kw, 0, S, n)
			tensor.Parallel(n, 16, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					r := sp.Start + i
					row := S[i*n : i*n+n]
					ex := pe[i*(k+1) : i*(k+1)+k+1]
					qv := q[r*qw+h*hd : r*qw+h*hd+hd]
					mx := row[0]
					for _, v := range row[1 : i+1] {
						if v > mx {
							mx = v
						}
					}
					for m := 1; m <= k; m++ {
						e := a.scale * dot(qv, keys[m][r*kw+g*hd:r*kw+g*hd+hd])
						ex[m] = e
						if e > mx {
							mx = e
						}
					}
					// Every argument is <= 0: the vectorised float32 exponential.
					sum := tensor.ExpShift(row[:i+1], mx)
					if k > 0 {
						sum += tensor.ExpShift(ex[1:k+1], mx)
					}
					inv := 1 / sum
					for j := 0; j <= i; j++ {
						row[j] *= inv
					}
					clear(row[i+1:])
					for m := 1; m <= k; m++ {
						ex[m] *= inv
					}
					lse[r*a.nq+h] = mx + float32(math.Log(float64(sum)))
				}
			})
			be.Sgemm(false, false, n, hd, n, 1, S, n, v0, kw, 0, oh, qw)
			if k > 0 {
				for i := 0; i < n; i++ {
					r := sp.Start + i
					o := out[r*qw+h*hd : r*qw+h*hd+hd]
					for m := 1; m <= k; m++ {
						axpy(o, pe[i*(k+1)+m], vals[m][r*kw+g*hd:r*kw+g*hd+hd])
					}
				}
			}
		}
	}
}

// attentionBackward is the derivative of attentionForward. Given dout (the
// gradient at the attention output) it ACCUMULATES into dq (this step's
// queries), dkeys[m] and dvals[m] for m = 0..k. With D = dout . out per row and
// head, dP = dout . v, the softmax gives dS = P (dP - D); then dq = scale dS K,
// dK = scale dS^T Q, dV = P^T dout (and the same per extra diagonal key).
// S and dP are n*n scratches, pe and dpe n*(k+1).
func attentionBackward(be tensor.Backend, a attnShape, dq []float32, dkeys, dvals [][]float32, dout, out, lse, q []float32, keys, vals [][]float32, seqs []Span, S, dP, pe []float32) {
	qw, kw, hd := a.qw(), a.kw(), a.hd
	k := len(keys) - 1
	group := a.nq / a.nkv
	for _, sp := range seqs {
		n := sp.N
		for h := 0; h < a.nq; h++ {
			g := h / group
			qh := q[sp.Start*qw+h*hd:]
			dqh := dq[sp.Start*qw+h*hd:]
			k0 := keys[0][sp.Start*kw+g*hd:]
			v0 := vals[0][sp.Start*kw+g*hd:]
			dk0 := dkeys[0][sp.Start*kw+g*hd:]
			dv0 := dvals[0][sp.Start*kw+g*hd:]
			doh := dout[sp.Start*qw+h*hd:]
			be.Sgemm(false, true, n, n, hd, a.scale, qh, qw, k0, kw, 0, S, n)
			be.Sgemm(false, true, n, n, hd, 1, doh, qw, v0, kw, 0, dP, n)
			// Rebuild P (into S) from the stored log-sum-exp, then turn dP into dS.
			tensor.Parallel(n, 16, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					r := sp.Start + i
					l := lse[r*a.nq+h]
					row, drow := S[i*n:i*n+n], dP[i*n:i*n+n]
					qv := q[r*qw+h*hd : r*qw+h*hd+hd]
					dov := dout[r*qw+h*hd : r*qw+h*hd+hd]
					D := dot(dov, out[r*qw+h*hd:r*qw+h*hd+hd])
					// row[j] - l <= 0 (l is the row's log-sum-exp), up to rounding.
					tensor.ExpShift(row[:i+1], l)
					for j := 0; j <= i; j++ {
						drow[j] = row[j] * (drow[j] - D)
					}
					clear(row[i+1:])
					clear(drow[i+1:])
					ex := pe[i*(k+1) : i*(k+1)+k+1]
					for m := 1; m <= k; m++ {
						km := keys[m][r*kw+g*hd : r*kw+g*hd+hd]
						p := tensor.Expf(a.scale*dot(qv, km) - l)
						// dV_m[r] += p dout; ds = p (dout . v_m[r] - D).
						axpy(dvals[m][r*kw+g*hd:r*kw+g*hd+hd], p, dov)
						ex[m] = p * (dot(dov, vals[m][r*kw+g*hd:r*kw+g*hd+hd]) - D)
					}
				}
			})
			// Diagonal keys: dq += scale ds k_m, dk_m += scale ds q (rows are
			// independent, but dvals/dkeys rows of one kv head are shared by the
			// query heads of a group, so this loop stays serial per head).
			for i := 0; i < n && k > 0; i++ {
				r := sp.Start + i
				qv := q[r*qw+h*hd : r*qw+h*hd+hd]
				dqv := dq[r*qw+h*hd : r*qw+h*hd+hd]
				for m := 1; m <= k; m++ {
					ds := a.scale * pe[i*(k+1)+m]
					axpy(dqv, ds, keys[m][r*kw+g*hd:r*kw+g*hd+hd])
					axpy(dkeys[m][r*kw+g*hd:r*kw+g*hd+hd], ds, qv)
				}
			}
			be.Sgemm(true, false, n, hd, n, 1, S, n, doh, qw, 1, dv0, kw)
			be.Sgemm(false, false, n, hd, n, a.scale, dP, n, k0, kw, 1, dqh, qw)
			be.Sgemm(true, false, n, hd, n, a.scale, dP, n, qh, qw, 1, dk0, kw)
		}
	}
}

func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy computes y += alpha*x.
func axpy(y []float32, alpha float32, x []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] += alpha * v
	}
}
