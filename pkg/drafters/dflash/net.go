package dflash

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// Block is one block of a pass's query rows: BlockSize rows from Row0 at
// positions Start..Start+BlockSize-1, which see the context rows 0..Ctx-1
// (the context positions strictly before the block's anchor: the anchor's
// own target state does not exist yet when the block is drafted) and the
// rows of their own block only (all of them, or those up to their own slot
// when the geometry is Causal).
type Block struct {
	Row0, Start, Ctx int
}

// Net runs the draft's passes over one batch and keeps the activations its
// backward pass reads. The context part (fc, hidden_norm and every layer's
// injected keys and values) and the block part are separate passes, so that
// the inference session can cache the former.
type Net[T Float] struct {
	g Geometry
	// W are the weights; G their gradients, which Backward accumulates
	// into (nil for inference).
	W, G *Weights[T]
	rot  *ropeTable
	// dev is a CPU device whose BLAS runs the float32 products (nil in
	// float64, where plain loops run them).
	dev tensor.Device

	// Context: S rows of fused features at positions ctxPos.
	S      int
	ctxPos []int
	feat   []T   // [S, Features*H], the caller's
	fcOut  []T   // [S, Hd] fc's output
	C      []T   // [S, Hd] the context features c
	kcRaw  [][]T // per layer [S, kvDim] keys before k_norm
	Kc, Vc [][]T // per layer [S, kvDim] keys (k_norm, RoPE) and values

	// Blocks: R query rows.
	R      int
	pos    []int
	blocks []Block
	kc, vc [][]T // the context keys and values the blocks attend to
	resid  [][]T // per layer + 1 [R, Hd] the residual stream entering layer l
	x, s1, x2,
	qRaw, q, kRaw, k, v, o,
	gate, up, act [][]T // per layer
	probs [][]T // per layer attention probabilities, row i's at pOff[i]
	pOff  []int
	// Y is the final norm's output [R, Hd], which the target's lm_head
	// turns into logits.
	Y []T

	// Backward's scratch.
	dS, dX, dX2, dO, dQ, dQRaw, dK, dKRaw, dV, dA, dG, dU []T
	dKc, dKcRaw, dVc, dC, dFC                             []T
}

// NewNet makes a net over weights w (and gradients g, nil for inference) of
// geometry geo.
func NewNet[T Float](geo Geometry, w, g *Weights[T]) *Net[T] {
	n := &Net[T]{g: geo, W: w, G: g, rot: newRopeTable(geo.HeadDim, geo.RopeTheta)}
	if _, ok := any(w.All).([]float32); ok {
		n.dev = cpu.New(nil)
	}
	L := geo.Layers
	for _, p := range []*[][]T{&n.kcRaw, &n.Kc, &n.Vc, &n.x, &n.s1, &n.x2, &n.qRaw, &n.q, &n.kRaw, &n.k, &n.v, &n.o, &n.gate, &n.up, &n.act, &n.probs} {
		*p = make([][]T, L)
	}
	n.resid = make([][]T, L+1)
	return n
}

// grow returns buf with length n, reallocating when its capacity is short.
func grow[T Float](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

// growZero is grow with the values cleared.
func growZero[T Float](buf []T, n int) []T {
	buf = grow(buf, n)
	clear(buf)
	return buf
}

// Context runs the context part over S rows of fused target features feat
// [S, Features*H] at positions pos: c = hidden_norm(fc(feat)), then every
// layer's injected keys k_norm(Wk c) (RoPE at pos) and values Wv c, into
// n.Kc and n.Vc. feat and pos must stay unchanged until Backward.
func (n *Net[T]) Context(feat []T, pos []int) error {
	g, w := n.g, n.W
	S := len(pos)
	if len(feat) != S*g.FCIn() {
		return fmt.Errorf("dflash: context: %d feature values for %d positions, want %d", len(feat), S, S*g.FCIn())
	}
	n.S, n.feat, n.ctxPos = S, feat, pos
	h, kd := g.Hidden, g.KVDim()
	n.fcOut, n.C = grow(n.fcOut, S*h), grow(n.C, S*h)
	linear(n.dev, n.fcOut, feat, w.FC, S, g.FCIn(), h, false)
	rmsNorm(n.C, n.fcOut, w.HiddenNorm, S, h, g.RMSNormEps)
	maxPos := -1
	for _, p := range pos {
		maxPos = max(maxPos, p)
	}
	n.rot.grow(maxPos)
	for l := range g.Layers {
		lw := &w.Layers[l]
		n.kcRaw[l], n.Kc[l], n.Vc[l] = grow(n.kcRaw[l], S*kd), grow(n.Kc[l], S*kd), grow(n.Vc[l], S*kd)
		linear(n.dev, n.kcRaw[l], n.C, lw.K, S, h, kd, false)
		rmsNorm(n.Kc[l], n.kcRaw[l], lw.KNorm, S*g.KVHeads, g.HeadDim, g.RMSNormEps)
		rope(n.rot, n.Kc[l], S, g.KVHeads, pos, 1)
		linear(n.dev, n.Vc[l], n.C, lw.V, S, h, kd, false)
	}
	return nil
}

// Blocks runs the block part: emb [R, Hd] holds the target's embeddings of
// the blocks' tokens (R = len(blocks)·BlockSize rows, block b's at
// blocks[b].Row0), and kc, vc each layer's context keys and values (n.Kc and
// n.Vc after Context, or an inference cache), of which block b reads rows
// 0..Ctx-1. It leaves the final norm's output in n.Y. emb, blocks, kc and vc
// must stay unchanged until Backward.
func (n *Net[T]) Blocks(emb []T, blocks []Block, kc, vc [][]T) error {
	g, w := n.g, n.W
	B, h, qd, kd, I := g.BlockSize, g.Hidden, g.QDim(), g.KVDim(), g.Intermediate
	R := len(blocks) * B
	if len(emb) != R*h {
		return fmt.Errorf("dflash: blocks: %d embedding values for %d blocks of %d rows, want %d", len(emb), len(blocks), B, R*h)
	}
	n.R, n.blocks, n.kc, n.vc = R, blocks, kc, vc
	n.pos = n.pos[:0]
	n.pOff = n.pOff[:0]
	off, maxPos := 0, 0
	for b, bl := range blocks {
		if bl.Row0 != b*B || bl.Ctx < 0 || bl.Start < 0 {
			return fmt.Errorf("dflash: block %d: rows from %d, context %d, start %d: blocks must be consecutive runs of %d rows with non-negative context and position", b, bl.Row0, bl.Ctx, bl.Start, B)
		}
		for _, t := range kc {
			if bl.Ctx*kd > len(t) {
				return fmt.Errorf("dflash: block %d sees %d context rows, the keys hold %d", b, bl.Ctx, len(t)/kd)
			}
		}
		for k := range B {
			n.pos = append(n.pos, bl.Start+k)
			n.pOff = append(n.pOff, off)
			off += g.Heads * (bl.Ctx + B)
		}
		maxPos = max(maxPos, bl.Start+B-1)
	}
	n.rot.grow(maxPos)
	n.resid[0] = emb
	for l := range g.Layers {
		lw := &w.Layers[l]
		n.x[l], n.s1[l], n.x2[l] = grow(n.x[l], R*h), grow(n.s1[l], R*h), grow(n.x2[l], R*h)
		n.qRaw[l], n.q[l], n.o[l] = grow(n.qRaw[l], R*qd), grow(n.q[l], R*qd), grow(n.o[l], R*qd)
		n.kRaw[l], n.k[l], n.v[l] = grow(n.kRaw[l], R*kd), grow(n.k[l], R*kd), grow(n.v[l], R*kd)
		n.gate[l], n.up[l], n.act[l] = grow(n.gate[l], R*I), grow(n.up[l], R*I), grow(n.act[l], R*I)
		n.probs[l] = grow(n.probs[l], off)
		n.resid[l+1] = grow(n.resid[l+1], R*h)
		s := n.resid[l]
		rmsNorm(n.x[l], s, lw.InputNorm, R, h, g.RMSNormEps)
		linear(n.dev, n.qRaw[l], n.x[l], lw.Q, R, h, qd, false)
		rmsNorm(n.q[l], n.qRaw[l], lw.QNorm, R*g.Heads, g.HeadDim, g.RMSNormEps)
		rope(n.rot, n.q[l], R, g.Heads, n.pos, 1)
		linear(n.dev, n.kRaw[l], n.x[l], lw.K, R, h, kd, false)
		rmsNorm(n.k[l], n.kRaw[l], lw.KNorm, R*g.KVHeads, g.HeadDim, g.RMSNormEps)
		rope(n.rot, n.k[l], R, g.KVHeads, n.pos, 1)
		linear(n.dev, n.v[l], n.x[l], lw.V, R, h, kd, false)
		n.attend(l)
		copy(n.s1[l], s)
		linear(n.dev, n.s1[l], n.o[l], lw.O, R, qd, h, true)
		rmsNorm(n.x2[l], n.s1[l], lw.PostNorm, R, h, g.RMSNormEps)
		linear(n.dev, n.gate[l], n.x2[l], lw.Gate, R, h, I, false)
		linear(n.dev, n.up[l], n.x2[l], lw.Up, R, h, I, false)
		swiGLU(n.act[l], n.gate[l], n.up[l])
		copy(n.resid[l+1], n.s1[l])
		linear(n.dev, n.resid[l+1], n.act[l], lw.Down, R, I, h, true)
	}
	n.Y = grow(n.Y, R*h)
	rmsNorm(n.Y, n.resid[g.Layers], w.Norm, R, h, g.RMSNormEps)
	return nil
}

// blockKeys is the number of its block's keys a row at slot si attends
// to: slots 0..blockKeys-1 (all of them, or up to its own when Causal).
func (n *Net[T]) blockKeys(si int) int {
	if n.g.Causal {
		return si + 1
	}
	return n.g.BlockSize
}

// attend computes layer l's attention output n.o[l] and probabilities: each
// query row over its block's visible context keys, then its block's keys.
func (n *Net[T]) attend(l int) {
	g := n.g
	B, hd, nq, kd := g.BlockSize, g.HeadDim, g.Heads, g.KVDim()
	group := g.Heads / g.KVHeads
	scale := 1 / math.Sqrt(float64(hd))
	q, kb, vb, kc, vc, o, probs := n.q[l], n.k[l], n.v[l], n.kc[l], n.vc[l], n.o[l], n.probs[l]
	parallelRows(n.R, (n.S+B)*nq*hd, func(lo, hi int) {
		sc := make([]float64, 0, 64)
		for i := lo; i < hi; i++ {
			bl := n.blocks[i/B]
			si := i - bl.Row0
			nb := n.blockKeys(si)
			L := bl.Ctx + B
			for h := range nq {
				kh := (h / group) * hd
				qv := q[(i*nq+h)*hd : (i*nq+h+1)*hd]
				p := probs[n.pOff[i]+h*L : n.pOff[i]+(h+1)*L]
				sc = sc[:0]
				mx := math.Inf(-1)
				// Context keys, then the block's own: one dot product
				// each, written out (no call per key).
				for j := range bl.Ctx + nb {
					kt, r := kc, j
					if j >= bl.Ctx {
						kt, r = kb, bl.Row0+j-bl.Ctx
					}
					kr := kt[r*kd+kh : r*kd+kh+hd]
					kr = kr[:len(qv)]
					var s T
					for d, x := range qv {
						s += x * kr[d]
					}
					v := float64(s) * scale
					sc = append(sc, v)
					mx = max(mx, v)
				}
				var z float64
				for j, s := range sc {
					sc[j] = math.Exp(s - mx)
					z += sc[j]
				}
				clear(p)
				ov := o[(i*nq+h)*hd : (i*nq+h+1)*hd]
				clear(ov)
				for j, e := range sc {
					pj := T(e / z)
					var vr []T
					if j < bl.Ctx {
						p[j] = pj
						vr = vc[j*kd+kh : j*kd+kh+hd]
					} else {
						p[j] = pj
						r := bl.Row0 + j - bl.Ctx
						vr = vb[r*kd+kh : r*kd+kh+hd]
					}
					vr = vr[:len(ov)]
					for d, x := range vr {
						ov[d] += pj * x
					}
				}
			}
		}
	})
}

// attendBackward accumulates layer l's attention gradients given n.dO: the
// queries' into n.dQ, the block keys' and values' into n.dK and n.dV, the
// context keys' and values' into n.dKc and n.dVc.
func (n *Net[T]) attendBackward(l int) {
	g := n.g
	B, hd, nq, kd := g.BlockSize, g.HeadDim, g.Heads, g.KVDim()
	group := g.Heads / g.KVHeads
	scale := T(1 / math.Sqrt(float64(hd)))
	q, kb, vb, kc, vc, probs := n.q[l], n.k[l], n.v[l], n.kc[l], n.vc[l], n.probs[l]
	var dp []T
	for i := range n.R {
		bl := n.blocks[i/B]
		nb := n.blockKeys(i - bl.Row0)
		L := bl.Ctx + B
		dp = grow(dp, L)
		for h := range nq {
			kh := (h / group) * hd
			qv := q[(i*nq+h)*hd : (i*nq+h+1)*hd]
			do := n.dO[(i*nq+h)*hd : (i*nq+h+1)*hd]
			dq := n.dQ[(i*nq+h)*hd : (i*nq+h+1)*hd]
			p := probs[n.pOff[i]+h*L : n.pOff[i]+(h+1)*L]
			row := func(j int) (k, v, dk, dv []T) {
				if j < bl.Ctx {
					return kc[j*kd+kh : j*kd+kh+hd], vc[j*kd+kh : j*kd+kh+hd], n.dKc[j*kd+kh : j*kd+kh+hd], n.dVc[j*kd+kh : j*kd+kh+hd]
				}
				r := bl.Row0 + j - bl.Ctx
				return kb[r*kd+kh : r*kd+kh+hd], vb[r*kd+kh : r*kd+kh+hd], n.dK[r*kd+kh : r*kd+kh+hd], n.dV[r*kd+kh : r*kd+kh+hd]
			}
			var sum T
			for j := range bl.Ctx + nb {
				_, v, _, dv := row(j)
				var s T
				for d, x := range do {
					s += x * v[d]
					dv[d] += p[j] * x
				}
				dp[j] = s
				sum += p[j] * s
			}
			for j := range bl.Ctx + nb {
				k, _, dk, _ := row(j)
				ds := p[j] * (dp[j] - sum) * scale
				for d := range hd {
					dq[d] += ds * k[d]
					dk[d] += ds * qv[d]
				}
			}
		}
	}
}

// Backward accumulates into n.G the gradients of every weight given dY [R,
// Hd] at the final norm's output, through the block part and the context
// part (the same context rows' keys and values feed every block). The
// blocks must have attended to the net's own context (Blocks with n.Kc and
// n.Vc after Context), through which it differentiates.
func (n *Net[T]) Backward(dY []T) {
	g, w, gw := n.g, n.W, n.G
	R, S, h, qd, kd, I := n.R, n.S, g.Hidden, g.QDim(), g.KVDim(), g.Intermediate
	n.dS = growZero(n.dS, R*h)
	rmsNormBackward(n.dS, gw.Norm, dY, n.resid[g.Layers], w.Norm, R, h, g.RMSNormEps)
	n.dC = growZero(n.dC, S*h)
	for l := g.Layers - 1; l >= 0; l-- {
		lw, lg := &w.Layers[l], &gw.Layers[l]
		// MLP: resid[l+1] = s1 + down(silu(gate(x2))·up(x2)), x2 = RMS(s1).
		n.dA = growZero(n.dA, R*I)
		linearBackward(n.dev, n.dA, lg.Down, n.dS, n.act[l], lw.Down, R, I, h)
		n.dG, n.dU = growZero(n.dG, R*I), growZero(n.dU, R*I)
		swiGLUBackward(n.dG, n.dU, n.dA, n.gate[l], n.up[l])
		n.dX2 = growZero(n.dX2, R*h)
		linearBackward(n.dev, n.dX2, lg.Gate, n.dG, n.x2[l], lw.Gate, R, h, I)
		linearBackward(n.dev, n.dX2, lg.Up, n.dU, n.x2[l], lw.Up, R, h, I)
		rmsNormBackward(n.dS, lg.PostNorm, n.dX2, n.s1[l], lw.PostNorm, R, h, g.RMSNormEps) // dS is now d s1
		// Attention: s1 = resid[l] + o_proj(attn).
		n.dO = growZero(n.dO, R*qd)
		linearBackward(n.dev, n.dO, lg.O, n.dS, n.o[l], lw.O, R, qd, h)
		n.dQ, n.dK, n.dV = growZero(n.dQ, R*qd), growZero(n.dK, R*kd), growZero(n.dV, R*kd)
		n.dKc, n.dVc = growZero(n.dKc, S*kd), growZero(n.dVc, S*kd)
		n.attendBackward(l)
		rope(n.rot, n.dQ, R, g.Heads, n.pos, -1)
		rope(n.rot, n.dK, R, g.KVHeads, n.pos, -1)
		n.dQRaw, n.dKRaw = growZero(n.dQRaw, R*qd), growZero(n.dKRaw, R*kd)
		rmsNormBackward(n.dQRaw, lg.QNorm, n.dQ, n.qRaw[l], lw.QNorm, R*g.Heads, g.HeadDim, g.RMSNormEps)
		rmsNormBackward(n.dKRaw, lg.KNorm, n.dK, n.kRaw[l], lw.KNorm, R*g.KVHeads, g.HeadDim, g.RMSNormEps)
		n.dX = growZero(n.dX, R*h)
		linearBackward(n.dev, n.dX, lg.Q, n.dQRaw, n.x[l], lw.Q, R, h, qd)
		linearBackward(n.dev, n.dX, lg.K, n.dKRaw, n.x[l], lw.K, R, h, kd)
		linearBackward(n.dev, n.dX, lg.V, n.dV, n.x[l], lw.V, R, h, kd)
		rmsNormBackward(n.dS, lg.InputNorm, n.dX, n.resid[l], lw.InputNorm, R, h, g.RMSNormEps) // dS is now d resid[l]
		// The injected context: Kc = RoPE(k_norm(Wk c)), Vc = Wv c, with the
		// layer's own Wk and Wv.
		if S > 0 {
			rope(n.rot, n.dKc, S, g.KVHeads, n.ctxPos, -1)
			n.dKcRaw = growZero(n.dKcRaw, S*kd)
			rmsNormBackward(n.dKcRaw, lg.KNorm, n.dKc, n.kcRaw[l], lw.KNorm, S*g.KVHeads, g.HeadDim, g.RMSNormEps)
			linearBackward(n.dev, n.dC, lg.K, n.dKcRaw, n.C, lw.K, S, h, kd)
			linearBackward(n.dev, n.dC, lg.V, n.dVc, n.C, lw.V, S, h, kd)
		}
	}
	if S > 0 {
		n.dFC = growZero(n.dFC, S*h)
		rmsNormBackward(n.dFC, gw.HiddenNorm, n.dC, n.fcOut, w.HiddenNorm, S, h, g.RMSNormEps)
		linearBackward(n.dev, nil, gw.FC, n.dFC, n.feat, w.FC, S, g.FCIn(), h)
	}
}
