package model

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// DeepSeek's multi-head latent attention, run in its absorbed form as the
// engines run it: the cache holds, per position, only the normed latent c
// (kv_lora_rank values) and the rotated key part k_r (qk_rope_head_dim),
// one multi-query head of kv_lora_rank+qk_rope_head_dim values. Each query
// head h reaches the latent through its slice of kv_b_proj: its score with
// a position, q_nope·(W_UK,h c) + q_r·k_r, is (q_nope·W_UK,h)·c + q_r·k_r,
// so the query's nope part is carried into the latent space once
// (Device.HeadMatMul) and the attention runs over [c, k_r] as keys; with
// [c, k_r] as values too, each head's output begins with Σ p·c, which
// W_UV,h carries out of the latent space. Transformers computes the same
// scores and outputs from the same cache, expanding it into every head's
// keys and values instead.

// MLA is one latent-attention block's weights as the checkpoint holds them.
type MLA struct {
	// QA, QANorm and QB are q_a_proj, q_a_layernorm and q_b_proj (QA
	// empty and Q set where q_lora_rank is null); KVA, KVANorm and KVB
	// kv_a_proj_with_mqa, kv_a_layernorm and kv_b_proj; O o_proj.
	QA, QB, Q, KVA, KVB, O Linear
	QANorm, KVANorm        []float32

	qaNorm, kvaNorm tensor.Tensor // the norms on the device
	wuk, wuv        tensor.Tensor // KVB's key rows [heads·nope, rank] and value rows [heads·v, rank], float32
}

// mlaScratch is the latent attention's activation memory beyond the
// pass's q (the whole query, [rows, heads·(rank+rope)]), k (the cached
// [c, k_r] rows) and att (the attention's output).
type mlaScratch struct {
	qa, q, qnope, qrot, qlat, ckv, lat, krot, olat, orope, ov tensor.Tensor
	parts                                                     []tensor.Tensor
}

// mlaDims are the latent attention's widths.
type mlaDims struct{ heads, qrank, rank, nope, rope, v int }

func mlaDimsOf(c *checkpoint.Config) mlaDims {
	return mlaDims{c.NumHeads, c.QLoraRank, c.KVLoraRank, c.QKNope, c.QKRope, c.VHead}
}

// growMLA allocates the latent attention's scratch for passes of rows rows.
func (m *Model) growMLA(al *tensor.Allocator, rows int) {
	d, s := mlaDimsOf(m.Config), &m.s.mla
	if d.qrank > 0 {
		s.qa = al.F32(rows, d.qrank)
	}
	s.q = al.F32(rows, d.heads*(d.nope+d.rope))
	s.qnope, s.qrot = al.F32(rows, d.heads*d.nope), al.F32(rows, d.heads*d.rope)
	s.qlat = al.F32(rows, d.heads*d.rank)
	s.ckv, s.lat, s.krot = al.F32(rows, d.rank+d.rope), al.F32(rows, d.rank), al.F32(rows, d.rope)
	s.olat, s.orope = al.F32(rows, d.heads*d.rank), al.F32(rows, d.heads*d.rope)
	s.ov = al.F32(rows, d.heads*d.v)
	s.parts = make([]tensor.Tensor, 0, 2)
}

// forward computes x += the block's attention over xn's rows, storing each
// row's [c, k_r] in its sequence's cache.
func (a *MLA) forward(m *Model, p *pass, li int) {
	dev, s, d := m.dev, &m.s.mla, mlaDimsOf(m.Config)
	R, qk, w := p.rows, d.nope+d.rope, d.rank+d.rope
	rr := func(t tensor.Tensor) tensor.Tensor { return t.RowRange(0, R) }
	q := rr(s.q)
	if !a.QA.W.Empty() {
		qa := rr(s.qa)
		a.QA.nn.Forward(dev, qa, p.xn)
		dev.RMSNorm(qa, qa, a.qaNorm, m.eps)
		a.QB.nn.Forward(dev, q, qa)
	} else {
		a.Q.nn.Forward(dev, q, p.xn)
	}
	qnope, qrot := rr(s.qnope), rr(s.qrot)
	s.parts = append(s.parts[:0], qnope.Reshape(R*d.heads, d.nope), qrot.Reshape(R*d.heads, d.rope))
	dev.SplitCols(q.Reshape(R*d.heads, qk), s.parts)
	ckv, lat, krot := rr(s.ckv), rr(s.lat), rr(s.krot)
	a.KVA.nn.Forward(dev, ckv, p.xn)
	s.parts = append(s.parts[:0], lat, krot)
	dev.SplitCols(ckv, s.parts)
	dev.RMSNorm(lat, lat, a.kvaNorm, m.eps)
	dev.RoPE(qrot, d.heads, p.pos, m.rot)
	dev.RoPE(krot, 1, p.pos, m.rot)
	qlat := rr(s.qlat)
	dev.HeadMatMul(qlat, qnope, a.wuk, d.heads, false)
	s.parts = append(s.parts[:0], qlat.Reshape(R*d.heads, d.rank), qrot.Reshape(R*d.heads, d.rope))
	dev.ConcatCols(p.q.Reshape(R*d.heads, w), s.parts)
	s.parts = append(s.parts[:0], lat, krot)
	dev.ConcatCols(p.k, s.parts)
	dev.Scale(p.q, m.scale)
	for i, sq := range m.s.seqs {
		as := &m.s.aseqs[i]
		k := p.k.RowRange(as.Row0, as.Row0+as.T)
		sq.kv.Write(li, 0, k, k)
	}
	dev.Attend(p.att, p.q, li, tensor.AttnShape{Heads: d.heads, KVHeads: 1, HeadDim: w}, m.s.aseqs)
	olat := rr(s.olat)
	s.parts = append(s.parts[:0], olat.Reshape(R*d.heads, d.rank), rr(s.orope).Reshape(R*d.heads, d.rope))
	dev.SplitCols(p.att.Reshape(R*d.heads, w), s.parts)
	ov := rr(s.ov)
	dev.HeadMatMul(ov, olat, a.wuv, d.heads, true)
	a.O.nn.ForwardAcc(dev, p.x, ov)
}

// prepareMLA puts a latent-attention block on the device: its layers
// frozen, its norms, and kv_b_proj's key and value rows as float32
// matrices for HeadMatMul.
func (m *Model) prepareMLA(a *MLA, norm func([]float32) (tensor.Tensor, error), ls []*nn.Linear) ([]*nn.Linear, error) {
	for _, lin := range []*Linear{&a.QA, &a.QB, &a.Q, &a.KVA, &a.O} {
		if lin.W.Empty() {
			continue
		}
		var err error
		if lin.nn, err = nn.NewFrozen(m.dev, lin.W, lin.B); err != nil {
			return ls, fmt.Errorf("model: %w", err)
		}
		ls = append(ls, lin.nn)
	}
	var err error
	if a.qaNorm, err = norm(a.QANorm); err != nil {
		return ls, err
	}
	if a.kvaNorm, err = norm(a.KVANorm); err != nil {
		return ls, err
	}
	d := mlaDimsOf(m.Config)
	wuk, wuv := make([]float32, d.heads*d.nope*d.rank), make([]float32, d.heads*d.v*d.rank)
	for h := 0; h < d.heads; h++ {
		base := h * (d.nope + d.v)
		for i := 0; i < d.nope; i++ {
			a.KVB.W.Row(wuk[(h*d.nope+i)*d.rank:], base+i)
		}
		for i := 0; i < d.v; i++ {
			a.KVB.W.Row(wuv[(h*d.v+i)*d.rank:], base+d.nope+i)
		}
	}
	if a.wuk, err = m.dev.Upload(tensor.F32Matrix(wuk, d.heads*d.nope, d.rank)); err != nil {
		return ls, fmt.Errorf("model: %w", err)
	}
	if a.wuv, err = m.dev.Upload(tensor.F32Matrix(wuv, d.heads*d.v, d.rank)); err != nil {
		return ls, fmt.Errorf("model: %w", err)
	}
	return ls, nil
}

// deinterleave reorders the rotary rows of the query and latent
// projections from DeepSeek's pairs (x0, x1), (x2, x3), ... to halves (x0,
// x2, ..., x1, x3, ...), so that rotate_half RoPE turns them exactly as
// Transformers' interleaved rotation does (its output is in that order
// too, and only dot products of rotated queries and keys are used). The
// reordered matrices are copies, in the checkpoint's dtype.
func (m *Model) deinterleave(a *MLA) {
	d := mlaDimsOf(m.Config)
	q := &a.QB
	if a.QA.W.Empty() {
		q = &a.Q
	}
	var rows []int // rows of q to permute: each head's rope part
	for h := 0; h < d.heads; h++ {
		rows = append(rows, h*(d.nope+d.rope)+d.nope)
	}
	q.W = permuteRope(q.W, rows, d.rope)
	a.KVA.W = permuteRope(a.KVA.W, []int{d.rank}, d.rope)
}

// permuteRope returns a copy of w whose rope rows starting at each of
// starts are de-interleaved: new row j < rope/2 is old row 2j, new row
// rope/2+j old row 2j+1.
func permuteRope(w tensor.Matrix, starts []int, rope int) tensor.Matrix {
	out := w
	c := w.Cols
	perm := make([]int, w.Rows)
	for r := range perm {
		perm[r] = r
	}
	for _, s := range starts {
		for j := 0; j < rope/2; j++ {
			perm[s+j] = s + 2*j
			perm[s+rope/2+j] = s + 2*j + 1
		}
	}
	if w.DType == tensor.F32 {
		out.F32 = make([]float32, len(w.F32))
		for r, o := range perm {
			copy(out.F32[r*c:(r+1)*c], w.F32[o*c:(o+1)*c])
		}
		return out
	}
	out.U16 = make([]uint16, len(w.U16))
	for r, o := range perm {
		copy(out.U16[r*c:(r+1)*c], w.U16[o*c:(o+1)*c])
	}
	return out
}
