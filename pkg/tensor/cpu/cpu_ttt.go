package cpu

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The CPU device's training-time-test attention (Device.AttendTTT and
// AttendTTTBackward), per sequence and query head: the step-0 scores of a
// whole sequence as one backend product into an n×n scratch (n: the
// sequence's length), the softmax rows split over the workers with the
// diagonal keys of steps 1..k scored by Dot beside them, then P·V as a second
// product and the diagonal values added by Axpy. The backward recomputes P
// from the stored log-sum-exp instead of keeping n² probabilities per head and
// step.

// tttScratch is the CPU device's scratch for AttendTTT and
// AttendTTTBackward, grown to the longest sequence and the most steps seen
// and kept between calls, so that steady-state calls allocate no buffers.
type tttScratch struct {
	s, dp []float32 // [n, n] scores (then probabilities) and their gradient
	pe    []float32 // [n, k+1] the diagonal keys' probabilities (or gradients)
	// The call's per-step host slices, cleared after it so that they do
	// not keep a caller's tensors alive.
	keys, vals, dkeys, dvals [][]float32
}

// grow sizes the scratch for sequences of up to n rows at step k; dp only
// for the backward (withGrad).
func (t *tttScratch) grow(n, k int, withGrad bool) {
	if len(t.s) < n*n {
		t.s = make([]float32, n*n)
	}
	if withGrad && len(t.dp) < n*n {
		t.dp = make([]float32, n*n)
	}
	if len(t.pe) < n*(k+1) {
		t.pe = make([]float32, n*(k+1))
	}
}

// tttScale is the scores' scale 1/√HeadDim, rounded to float32 once, as the
// EAGLE-3 layer computes it.
func tttScale(hd int) float32 { return float32(1 / math.Sqrt(float64(hd))) }

// checkTTT panics unless the arguments of a training-time-test attention call
// agree: shapes of the head layout, one value tensor per key tensor, and every
// span inside every row-indexed tensor. It returns the longest span.
func checkTTT(out, lse, q tensor.Tensor, keys, vals []tensor.Tensor, shape tensor.AttnShape, seqs []tensor.Span) int {
	qw, kw := shape.Heads*shape.HeadDim, shape.KVHeads*shape.HeadDim
	if shape.HeadDim <= 0 || shape.KVHeads <= 0 || shape.Heads%shape.KVHeads != 0 {
		panic(fmt.Sprintf("tensor: AttendTTT: %d heads over %d KV heads of width %d", shape.Heads, shape.KVHeads, shape.HeadDim))
	}
	if shape.Softcap != 0 || shape.Window != 0 || !shape.Sinks.Empty() {
		panic(fmt.Sprintf("tensor: AttendTTT: softcap %v, window %d and sinks %v: the training-time-test attention takes none", shape.Softcap, shape.Window, !shape.Sinks.Empty()))
	}
	if len(keys) == 0 || len(vals) != len(keys) {
		panic(fmt.Sprintf("tensor: AttendTTT: %d key and %d value tensors (want the same number, at least one)", len(keys), len(vals)))
	}
	rows := min(out.Rows(), q.Rows(), lse.Rows())
	if out.Cols() != qw || q.Cols() != qw || lse.Cols() != shape.Heads {
		panic(fmt.Sprintf("tensor: AttendTTT: out %d, q %d and lse %d columns for %d heads of width %d", out.Cols(), q.Cols(), lse.Cols(), shape.Heads, shape.HeadDim))
	}
	for m := range keys {
		if keys[m].Cols() != kw || vals[m].Cols() != kw {
			panic(fmt.Sprintf("tensor: AttendTTT: step %d keys of %d and values of %d columns, want %d", m, keys[m].Cols(), vals[m].Cols(), kw))
		}
		rows = min(rows, keys[m].Rows(), vals[m].Rows())
	}
	n := 0
	for _, sp := range seqs {
		if sp.Start < 0 || sp.N < 0 || sp.Start+sp.N > rows {
			panic(fmt.Sprintf("tensor: AttendTTT: sequence rows [%d, %d) outside %d rows", sp.Start, sp.Start+sp.N, rows))
		}
		n = max(n, sp.N)
	}
	return n
}

// AttendTTT computes step len(keys)-1 of the training-time-test attention;
// see Device.AttendTTT.
func (c *Device) AttendTTT(out, lse, q tensor.Tensor, keys, vals []tensor.Tensor, shape tensor.AttnShape, seqs []tensor.Span) {
	n := checkTTT(out, lse, q, keys, vals, shape, seqs)
	k := len(keys) - 1
	t := &c.ttt
	t.grow(n, k, false)
	t.keys, t.vals = hostSlices(t.keys[:0], keys), hostSlices(t.vals[:0], vals)
	tttForward(c.be, shape, tttScale(shape.HeadDim), f32s(out), f32s(lse), f32s(q), t.keys, t.vals, seqs, t.s, t.pe)
	clear(t.keys)
	clear(t.vals)
}

// AttendTTTBackward accumulates the gradients of AttendTTT; see
// Device.AttendTTTBackward.
func (c *Device) AttendTTTBackward(dq tensor.Tensor, dkeys, dvals []tensor.Tensor, dout, out, lse, q tensor.Tensor, keys, vals []tensor.Tensor, shape tensor.AttnShape, seqs []tensor.Span) {
	n := checkTTT(out, lse, q, keys, vals, shape, seqs)
	checkTTT(dout, lse, dq, dkeys, dvals, shape, seqs)
	if len(dkeys) != len(keys) {
		panic(fmt.Sprintf("tensor: AttendTTTBackward: gradients of %d steps for %d steps", len(dkeys), len(keys)))
	}
	k := len(keys) - 1
	t := &c.ttt
	t.grow(n, k, true)
	t.keys, t.vals = hostSlices(t.keys[:0], keys), hostSlices(t.vals[:0], vals)
	t.dkeys, t.dvals = hostSlices(t.dkeys[:0], dkeys), hostSlices(t.dvals[:0], dvals)
	tttBackward(c.be, shape, tttScale(shape.HeadDim), f32s(dq), t.dkeys, t.dvals, f32s(dout), f32s(out), f32s(lse), f32s(q), t.keys, t.vals, seqs, t.s, t.dp, t.pe)
	clear(t.keys)
	clear(t.vals)
	clear(t.dkeys)
	clear(t.dvals)
}

// hostSlices appends the float32 values of ts to dst (the scratch's, reused
// so that a call allocates nothing once it has seen the unroll's length).
func hostSlices(dst [][]float32, ts []tensor.Tensor) [][]float32 {
	for _, t := range ts {
		dst = append(dst, f32s(t))
	}
	return dst
}

// tttForward is AttendTTT on host slices: shape's head layout, scores scaled
// by scale, keys[m] and vals[m] step m's [R, KVHeads·HeadDim]. S is an n·n
// scratch, pe an n·(k+1) scratch (n: the longest sequence).
func tttForward(be Backend, shape tensor.AttnShape, scale float32, out, lse, q []float32, keys, vals [][]float32, seqs []tensor.Span, S, pe []float32) {
	nq, hd := shape.Heads, shape.HeadDim
	qw, kw := nq*hd, shape.KVHeads*hd
	k := len(keys) - 1
	group := nq / shape.KVHeads
	for _, sp := range seqs {
		n := sp.N
		for h := 0; h < nq; h++ {
			g := h / group
			qh := q[sp.Start*qw+h*hd:]
			k0 := keys[0][sp.Start*kw+g*hd:]
			v0 := vals[0][sp.Start*kw+g*hd:]
			oh := out[sp.Start*qw+h*hd:]
			be.Sgemm(false, true, n, n, hd, scale, qh, qw, k0, kw, 0, S, n)
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
						e := scale * dot(qv, keys[m][r*kw+g*hd:r*kw+g*hd+hd])
						ex[m] = e
						if e > mx {
							mx = e
						}
					}
					// Every argument is <= 0: the vectorised float32 exponential.
					sum := ExpShift(row[:i+1], mx)
					if k > 0 {
						sum += ExpShift(ex[1:k+1], mx)
					}
					inv := 1 / sum
					for j := 0; j <= i; j++ {
						row[j] *= inv
					}
					clear(row[i+1:])
					for m := 1; m <= k; m++ {
						ex[m] *= inv
					}
					lse[r*nq+h] = mx + float32(math.Log(float64(sum)))
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

// tttBackward is AttendTTTBackward on host slices. With D = dout·out per row
// and head and dP = dout·v, the softmax gives dS = P(dP - D); then dq = scale
// dS K, dK = scale dSᵀ Q, dV = Pᵀ dout (and the same per diagonal key of
// steps 1..k). S and dP are n·n scratches, pe an n·(k+1) one.
func tttBackward(be Backend, shape tensor.AttnShape, scale float32, dq []float32, dkeys, dvals [][]float32, dout, out, lse, q []float32, keys, vals [][]float32, seqs []tensor.Span, S, dP, pe []float32) {
	nq, hd := shape.Heads, shape.HeadDim
	qw, kw := nq*hd, shape.KVHeads*hd
	k := len(keys) - 1
	group := nq / shape.KVHeads
	for _, sp := range seqs {
		n := sp.N
		for h := 0; h < nq; h++ {
			g := h / group
			qh := q[sp.Start*qw+h*hd:]
			dqh := dq[sp.Start*qw+h*hd:]
			k0 := keys[0][sp.Start*kw+g*hd:]
			v0 := vals[0][sp.Start*kw+g*hd:]
			dk0 := dkeys[0][sp.Start*kw+g*hd:]
			dv0 := dvals[0][sp.Start*kw+g*hd:]
			doh := dout[sp.Start*qw+h*hd:]
			be.Sgemm(false, true, n, n, hd, scale, qh, qw, k0, kw, 0, S, n)
			be.Sgemm(false, true, n, n, hd, 1, doh, qw, v0, kw, 0, dP, n)
			// Rebuild P (into S) from the stored log-sum-exp, then turn dP into dS.
			tensor.Parallel(n, 16, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					r := sp.Start + i
					l := lse[r*nq+h]
					row, drow := S[i*n:i*n+n], dP[i*n:i*n+n]
					qv := q[r*qw+h*hd : r*qw+h*hd+hd]
					dov := dout[r*qw+h*hd : r*qw+h*hd+hd]
					D := dot(dov, out[r*qw+h*hd:r*qw+h*hd+hd])
					// row[j] - l <= 0 (l is the row's log-sum-exp), up to rounding.
					ExpShift(row[:i+1], l)
					for j := 0; j <= i; j++ {
						drow[j] = row[j] * (drow[j] - D)
					}
					clear(row[i+1:])
					clear(drow[i+1:])
					ex := pe[i*(k+1) : i*(k+1)+k+1]
					for m := 1; m <= k; m++ {
						km := keys[m][r*kw+g*hd : r*kw+g*hd+hd]
						p := Expf(scale*dot(qv, km) - l)
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
					ds := scale * pe[i*(k+1)+m]
					axpy(dqv, ds, keys[m][r*kw+g*hd:r*kw+g*hd+hd])
					axpy(dkeys[m][r*kw+g*hd:r*kw+g*hd+hd], ds, qv)
				}
			}
			be.Sgemm(true, false, n, hd, n, 1, S, n, doh, qw, 1, dv0, kw)
			be.Sgemm(false, false, n, hd, n, scale, dP, n, k0, kw, 1, dqh, qw)
			be.Sgemm(true, false, n, hd, n, scale, dP, n, qh, qw, 1, dk0, kw)
		}
	}
}

// dot returns a·b over len(a) values (b at least as long) in float32, in four
// interleaved partial sums (value i in sum i%4, the tail past the last
// multiple of four in the first) added as (s0+s1)+(s2+s3): the per-row
// products of the training-time-test attention with its diagonal keys.
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

// axpy computes y += alpha·x over len(y) values (x at least as long), one
// value at a time in float32: dot's companion for the same attention's value
// sums.
func axpy(y []float32, alpha float32, x []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] += alpha * v
	}
}
