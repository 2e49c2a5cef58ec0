package eagle3

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Layer is the draft layer with its parameters: fc (the fused target
// feature in), the decoder layer, and the final norm and lm_head (the draft
// vocabulary's logits out). The trainer's unroll and the drafting session run
// this one Forward; they differ only where the caller must choose:
//
//   - the attention (Attention), which the caller supplies: training attends
//     over the unrolled steps of packed sequences (TTT), the session over its
//     KV cache and draft tree; the two are different algorithms;
//   - the products of a frozen draft (Freeze), which multiply by transposed
//     copies of the weights (tensor.Transposed, several times faster on one
//     row) where training multiplies by the weights it updates;
//   - the SwiGLU activation's split: training's is nn.SwiGLU (split over the
//     workers, with the backward beside it), drafting's tensor.SwiGLU on the
//     calling goroutine. Both compute the target model's vectorised kernel
//     (a float32 exponential, tensor.Expf), bit for bit.
//
// The norms are tensor.RMSNorm in both.
type Layer struct {
	// G is the layer's geometry and P its parameters (a trainer's are
	// updated in place between passes).
	G    Geometry
	P    *Params
	be   tensor.Backend
	rope *nn.RoPE
	a    attnShape
	// t holds transposed copies of the weights once frozen (nil: products
	// by the weights themselves).
	t *draftMats
	// swiglu is nn.SwiGLU for training, tensor.SwiGLU for drafting.
	swiglu func(out, gate, up []float32)
}

// draftMats holds the draft's matrices transposed for tensor.Transposed's
// few-row products.
type draftMats struct {
	fc, q, k, v, o, gate, up, down, lm *tensor.Transposed
}

// NewLayer wraps parameters p of geometry g as the layer training runs, with
// RoPE tables for positions up to maxPos (the geometry's maximum when
// larger).
func NewLayer(g Geometry, p *Params, be tensor.Backend, maxPos int) (*Layer, error) {
	return newLayer(g, p, be, maxPos, nn.SwiGLU)
}

func newLayer(g Geometry, p *Params, be tensor.Backend, maxPos int, swiglu func(out, gate, up []float32)) (*Layer, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	rope, err := nn.NewRoPE(g.HeadDim, g.RopeTheta, g.RopeScaling, max(g.MaxPositions, maxPos))
	if err != nil {
		return nil, fmt.Errorf("eagle3: draft RoPE: %w", err)
	}
	return &Layer{G: g, P: p, be: be, rope: rope, a: newAttnShape(g), swiglu: swiglu}, nil
}

// mats returns the transposed matrices, or none when not frozen.
func (l *Layer) mats() draftMats {
	if l.t != nil {
		return *l.t
	}
	return draftMats{}
}

// mul computes out[rows, n] = x[rows, k]·w[n, k]^T through wt when the draft
// is frozen, else through tensor.MatMulT (nn.Linear without a bias).
func (l *Layer) mul(out, x, w []float32, wt *tensor.Transposed, rows, n, k int) {
	if wt != nil {
		wt.MulCols(out, n, x, k, rows, 0, n, false)
		return
	}
	tensor.MatMulT(l.be, out[:rows*n], x[:rows*k], w[:n*k], rows, n, k)
}

// Attention is the layer's attention, which its caller supplies.
type Attention interface {
	// Attend writes the attention output o [rows, heads*head_dim] of the
	// rows' queries q (RoPE applied), whose own keys k (RoPE applied) and
	// values v it keeps wherever its algorithm attends to them.
	Attend(o, q, k, v []float32, rows int)
}

// AttentionGrad is an Attention with a backward pass.
type AttentionGrad interface {
	Attention
	// AttendBackward accumulates into dq the gradient of the rows' queries,
	// given do at the output o of Attend, and returns the complete
	// gradients of the rows' (RoPE'd) keys and values.
	AttendBackward(dq, do, o, q []float32, rows int) (dk, dv []float32)
}

// Acts are one application of the layer to R rows: its inputs and every
// activation Backward reads.
type Acts struct {
	// E holds the rows' token embeddings and H their hidden inputs (fc's
	// output, or the previous step's Out), [R, H] each; Pos their RoPE
	// positions.
	E, H []float32
	Pos  []int32
	X    []float32 // [R, 2H] cat(input_layernorm(E), hidden_norm(H))
	Q, K []float32 // RoPE'd queries and keys
	V, O []float32 // values, attention output before o_proj
	A1   []float32 // [R, H] H + o_proj(O)
	N2   []float32 // [R, H] post_attention_layernorm(A1)
	Gate []float32 // [R, I]
	Up   []float32 // [R, I]
	Out  []float32 // [R, H] A1 + down(swiglu(Gate, Up)): the pre-norm output
}

// Scratch holds Forward's temporaries; one may serve many Acts.
type Scratch struct {
	XE, XH []float32 // [R, H] the two normed halves of X
	Act    []float32 // [R, I] swiglu(Gate, Up); may be Gate when no backward follows
}

// FC computes the hidden input of the first step from rows fused target
// features (feat [rows, 3H]) into out [rows, H].
func (l *Layer) FC(out, feat []float32, rows int) {
	h := l.G.Hidden
	l.mul(out, feat, l.P.FC, l.mats().fc, rows, h, 3*h)
}

// Forward runs the decoder layer over rows rows of a (inputs E, H, Pos;
// activations written), attending through attn.
func (l *Layer) Forward(a *Acts, s *Scratch, rows int, attn Attention) {
	g, p, t := l.G, l.P, l.mats()
	h, qw, kw, I := g.Hidden, g.QDim(), g.KVDim(), g.Intermediate
	eps := float32(g.RMSNormEps)
	tensor.RMSNorm(s.XE, a.E, p.InputNorm, rows, h, eps)
	tensor.RMSNorm(s.XH, a.H, p.HiddenNorm, rows, h, eps)
	interleave(a.X, s.XE, s.XH, rows, h)
	l.mul(a.Q, a.X, p.Q, t.q, rows, qw, 2*h)
	l.mul(a.K, a.X, p.K, t.k, rows, kw, 2*h)
	l.mul(a.V, a.X, p.V, t.v, rows, kw, 2*h)
	l.rope.Forward(a.Q, rows, g.Heads, a.Pos[:rows])
	l.rope.Forward(a.K, rows, g.KVHeads, a.Pos[:rows])
	attn.Attend(a.O, a.Q, a.K, a.V, rows)
	l.mul(a.A1, a.O, p.O, t.o, rows, h, qw)
	add(a.A1[:rows*h], a.H)
	tensor.RMSNorm(a.N2, a.A1, p.PostNorm, rows, h, eps)
	l.mul(a.Gate, a.N2, p.Gate, t.gate, rows, I, h)
	l.mul(a.Up, a.N2, p.Up, t.up, rows, I, h)
	l.swiglu(s.Act[:rows*I], a.Gate[:rows*I], a.Up[:rows*I])
	l.mul(a.Out, s.Act, p.Down, t.down, rows, h, I)
	add(a.Out[:rows*h], a.A1)
}

// Logits writes the draft-vocabulary logits [rows, N] of rows pre-norm
// outputs out into dst, the normed outputs into fn [rows, H].
func (l *Layer) Logits(dst, fn, out []float32, rows int) {
	g := l.G
	tensor.RMSNorm(fn, out, l.P.Norm, rows, g.Hidden, float32(g.RMSNormEps))
	l.mul(dst, fn, l.P.LMHead, l.mats().lm, rows, g.DraftVocab, g.Hidden)
}

// GradScratch holds Backward's temporaries for up to R rows.
type GradScratch struct {
	Act, DAct, DGate, DUp []float32 // [R, I]
	DN2, DA1, DXE, DXH    []float32 // [R, H]
	DO, DQ                []float32 // [R, heads*head_dim]
	DX                    []float32 // [R, 2H]
}

// NewGradScratch allocates Backward's temporaries for up to rows rows.
func (l *Layer) NewGradScratch(rows int) *GradScratch {
	h, qw, I := l.G.Hidden, l.G.QDim(), l.G.Intermediate
	f := func(n int) []float32 { return make([]float32, rows*n) }
	return &GradScratch{Act: f(I), DAct: f(I), DGate: f(I), DUp: f(I), DN2: f(h), DA1: f(h), DXE: f(h), DXH: f(h),
		DO: f(qw), DQ: f(qw), DX: f(2 * h)}
}

// LogitsBackward writes into dfn [rows, H] the gradient at Logits' normed
// outputs fn, given dlogits at its output, and accumulates lm_head's
// gradient into gr.
func (l *Layer) LogitsBackward(gr *Params, dfn, dlogits, fn []float32, rows int) {
	h := l.G.Hidden
	clear(dfn[:rows*h])
	nn.LinearBackward(l.be, dfn, gr.LMHead, nil, dlogits, fn, l.P.LMHead, rows, h, l.G.DraftVocab)
}

// NormBackward accumulates into dout [rows, H] the gradient at the pre-norm
// outputs out through the final norm, given dfn at its output, and the
// norm's gradient into gr.
func (l *Layer) NormBackward(gr *Params, dout, dfn, out []float32, rows int) {
	tensor.RMSNormBackward(dout, gr.Norm, dfn, out, l.P.Norm, rows, l.G.Hidden, float32(l.G.RMSNormEps))
}

// Backward back-propagates dOut, the gradient at a.Out, through the decoder
// layer over rows rows: it accumulates the parameter gradients into gr and
// writes the gradient at the hidden input a.H into dH. a.E must hold the
// rows' embeddings again (a caller sharing one embedding buffer between
// applications gathers them anew).
func (l *Layer) Backward(gr *Params, a *Acts, dOut, dH []float32, rows int, attn AttentionGrad, s *GradScratch) {
	g, p, be := l.G, l.P, l.be
	R, h, qw, kw, I := rows, g.Hidden, g.QDim(), g.KVDim(), g.Intermediate
	eps := float32(g.RMSNormEps)
	// Out = A1 + down(swiglu(gate(N2), up(N2))).
	nn.SwiGLU(s.Act[:R*I], a.Gate[:R*I], a.Up[:R*I])
	clear(s.DAct[:R*I])
	nn.LinearBackward(be, s.DAct, gr.Down, nil, dOut, s.Act, p.Down, R, I, h)
	clear(s.DGate[:R*I])
	clear(s.DUp[:R*I])
	nn.SwiGLUBackward(s.DGate[:R*I], s.DUp[:R*I], s.DAct[:R*I], a.Gate[:R*I], a.Up[:R*I])
	clear(s.DN2[:R*h])
	nn.LinearBackward(be, s.DN2, gr.Gate, nil, s.DGate, a.N2, p.Gate, R, h, I)
	nn.LinearBackward(be, s.DN2, gr.Up, nil, s.DUp, a.N2, p.Up, R, h, I)
	copy(s.DA1[:R*h], dOut[:R*h])
	tensor.RMSNormBackward(s.DA1, gr.PostNorm, s.DN2, a.A1, p.PostNorm, R, h, eps)
	// A1 = H + o_proj(O): the residual carries DA1 straight to H.
	clear(s.DO[:R*qw])
	nn.LinearBackward(be, s.DO, gr.O, nil, s.DA1, a.O, p.O, R, qw, h)
	copy(dH[:R*h], s.DA1[:R*h])
	clear(s.DQ[:R*qw])
	dk, dv := attn.AttendBackward(s.DQ, s.DO, a.O, a.Q, R)
	l.rope.Backward(s.DQ, R, g.Heads, a.Pos[:R])
	l.rope.Backward(dk, R, g.KVHeads, a.Pos[:R])
	clear(s.DX[:R*2*h])
	nn.LinearBackward(be, s.DX, gr.Q, nil, s.DQ, a.X, p.Q, R, 2*h, qw)
	nn.LinearBackward(be, s.DX, gr.K, nil, dk, a.X, p.K, R, 2*h, kw)
	nn.LinearBackward(be, s.DX, gr.V, nil, dv, a.X, p.V, R, 2*h, kw)
	deinterleave(s.DXE, s.DXH, s.DX, R, h)
	tensor.RMSNormBackward(nil, gr.InputNorm, s.DXE, a.E, p.InputNorm, R, h, eps)
	tensor.RMSNormBackward(dH, gr.HiddenNorm, s.DXH, a.H, p.HiddenNorm, R, h, eps)
}

// FCBackward accumulates fc's gradient into gr given dH at its output for
// rows features feat (the features themselves are not trained).
func (l *Layer) FCBackward(gr *Params, dH, feat []float32, rows int) {
	h := l.G.Hidden
	nn.LinearBackward(l.be, nil, gr.FC, nil, dH, feat, l.P.FC, rows, 3*h, h)
}

// interleave writes rows [a_r | b_r] of width 2h.
func interleave(dst, a, b []float32, rows, h int) {
	for r := 0; r < rows; r++ {
		copy(dst[2*r*h:(2*r+1)*h], a[r*h:(r+1)*h])
		copy(dst[(2*r+1)*h:(2*r+2)*h], b[r*h:(r+1)*h])
	}
}

// deinterleave splits rows of width 2h into their halves.
func deinterleave(a, b, src []float32, rows, h int) {
	for r := 0; r < rows; r++ {
		copy(a[r*h:(r+1)*h], src[2*r*h:(2*r+1)*h])
		copy(b[r*h:(r+1)*h], src[(2*r+1)*h:(2*r+2)*h])
	}
}

func add(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}
