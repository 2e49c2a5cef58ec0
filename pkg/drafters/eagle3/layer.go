package eagle3

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Layer is the draft layer with its parameters on a device: fc (the fused
// target feature in), the decoder layer, and the final norm and lm_head (the
// draft vocabulary's logits out). The trainer's unroll and the drafting
// session run this one Forward, as device ops over device tensors; they
// differ only in the attention (an nn.Attender), which the caller supplies:
// training attends over the unrolled steps of packed sequences (TTT), the
// session over its KV cache and draft tree. A frozen draft (Freeze)
// multiplies through the device's weight products, which may keep the
// weights in other layouts; a trainer's through its updated weights.
//
// A Layer holds no scratch: several callers may run one, each on a device
// value of its own that shares the memory of the device the layer's weights
// were uploaded to (on the CPU, every device: the host's memory).
type Layer struct {
	// G is the layer's geometry and P its parameters in host memory: the
	// values the layer was built from, and for a trainer's layer
	// (NewTrainLayer), whose master weights live on the device, the values
	// ReadWeights last copied back.
	G Geometry
	P *Params
	w *Weights
	// master says that w is a trainer's master weights, allocated on the
	// device.
	master bool
	// The blocks and products: an uploaded layer's over P's matrices, a
	// trainer's over its master weights w.
	attn   *nn.Attention
	mlp    *nn.MLP
	fc, lm *nn.Linear
}

// NewLayer wraps parameters p of geometry g as a layer on dev (uploaded:
// viewed where the device's memory is the host's), with RoPE tables for
// positions up to maxPos (the geometry's maximum when larger).
func NewLayer(dev tensor.Device, g Geometry, p *Params, maxPos int) (*Layer, error) {
	return newLayer(dev, g, p, maxPos, false)
}

// NewTrainLayer is NewLayer for a trainer: the layer's master weights are
// p's values uploaded to dev (Weights), the optimiser updates them there,
// and ReadWeights copies them back into p.
func NewTrainLayer(dev tensor.Device, g Geometry, p *Params, maxPos int) (*Layer, error) {
	return newLayer(dev, g, p, maxPos, true)
}

func newLayer(dev tensor.Device, g Geometry, p *Params, maxPos int, master bool) (*Layer, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	rope, err := nn.NewRoPE(g.HeadDim, g.RopeTheta, g.RopeScaling, max(g.MaxPositions, maxPos))
	if err != nil {
		return nil, fmt.Errorf("eagle3: draft RoPE: %w", err)
	}
	l := &Layer{G: g, P: p, master: master, mlp: &nn.MLP{},
		attn: &nn.Attention{Shape: tensor.AttnShape{Heads: g.Heads, KVHeads: g.KVHeads, HeadDim: g.HeadDim}}}
	if l.attn.Rot, err = rope.On(dev); err != nil {
		return nil, fmt.Errorf("eagle3: draft RoPE: %w", err)
	}
	// Uploaded either way: a trainer's master weights are a copy the
	// optimiser updates on a device whose memory is not the host's, and p's
	// values themselves on the CPU device (no second copy); ReadWeights
	// brings them back into p through the device.
	if l.w, err = p.On(dev, g); err != nil {
		return nil, err
	}
	h, qw, kw, I := g.Hidden, g.QDim(), g.KVDim(), g.Intermediate
	w := l.w
	for _, m := range []struct {
		dst     **nn.Linear
		v       []float32
		t       tensor.Tensor
		out, in int
		name    string
	}{
		{&l.fc, p.FC, w.FC, h, 3 * h, "fc"}, {&l.attn.Q, p.Q, w.Q, qw, 2 * h, "q_proj"}, {&l.attn.K, p.K, w.K, kw, 2 * h, "k_proj"},
		{&l.attn.V, p.V, w.V, kw, 2 * h, "v_proj"}, {&l.attn.O, p.O, w.O, h, qw, "o_proj"}, {&l.mlp.Gate, p.Gate, w.Gate, I, h, "gate_proj"},
		{&l.mlp.Up, p.Up, w.Up, I, h, "up_proj"}, {&l.mlp.Down, p.Down, w.Down, h, I, "down_proj"}, {&l.lm, p.LMHead, w.LMHead, g.DraftVocab, h, "lm_head"},
	} {
		if master {
			*m.dst, err = nn.NewLinearOf(m.t, tensor.Tensor{})
		} else {
			*m.dst, err = nn.NewLinear(dev, tensor.F32Matrix(m.v, m.out, m.in), nil)
		}
		if err != nil {
			return nil, fmt.Errorf("eagle3: %s: %w", m.name, err)
		}
	}
	return l, nil
}

// Weights returns the layer's weights on its device: for a trainer's layer
// (NewTrainLayer), the master weights the optimiser updates.
func (l *Layer) Weights() *Weights { return l.w }

// ReadWeights copies a trainer's layer's master weights from the device
// into P through dev (a device value sharing the layer's memory), for an
// export or a draft built from them; a no-op for an uploaded layer, whose
// P is already what it computes with.
func (l *Layer) ReadWeights(dev tensor.Device) {
	if l.master {
		l.w.Read(dev, l.P, l.G)
	}
}

// Freeze prepares the layer for inference with parameters that no longer
// change: its products then run through dev's weight products, in whatever
// layouts the device chooses for them (tensor.Device.PrepareWeights). A
// layer wrapping a trainer's live parameters must not be frozen.
func (l *Layer) Freeze(dev tensor.Device) {
	nn.Freeze(dev, nil, l.fc, l.attn.Q, l.attn.K, l.attn.V, l.attn.O, l.mlp.Gate, l.mlp.Up, l.mlp.Down, l.lm)
}

// Acts are one application of the layer to up to R rows: its inputs and
// every activation Backward reads, device tensors of R rows each (a pass
// over fewer rows uses their first rows).
type Acts struct {
	// E holds the rows' token embeddings and H their hidden inputs (fc's
	// output, or the previous step's Out), [R, H] each; Pos their RoPE
	// positions (I32 [R, 1]).
	E, H tensor.Tensor
	Pos  tensor.Tensor
	X    tensor.Tensor // [R, 2H] cat(input_layernorm(E), hidden_norm(H))
	Q, K tensor.Tensor // RoPE'd queries and keys
	V, O tensor.Tensor // values, attention output before o_proj
	A1   tensor.Tensor // [R, H] H + o_proj(O)
	N2   tensor.Tensor // [R, H] post_attention_layernorm(A1)
	Gate tensor.Tensor // [R, I]
	Up   tensor.Tensor // [R, I]
	Out  tensor.Tensor // [R, H] A1 + down(swiglu(Gate, Up)): the pre-norm output
}

// NewActs allocates the activations of up to rows rows on dev.
func (l *Layer) NewActs(dev tensor.Device, rows int) (*Acts, error) {
	g := l.G
	h, qw, kw, I := g.Hidden, g.QDim(), g.KVDim(), g.Intermediate
	al := tensor.Allocator{Dev: dev}
	a := &Acts{E: al.F32(rows, h), H: al.F32(rows, h), Pos: al.Alloc(tensor.I32, rows, 1), X: al.F32(rows, 2*h),
		Q: al.F32(rows, qw), K: al.F32(rows, kw), V: al.F32(rows, kw), O: al.F32(rows, qw), A1: al.F32(rows, h),
		N2: al.F32(rows, h), Gate: al.F32(rows, I), Up: al.F32(rows, I), Out: al.F32(rows, h)}
	return a, wrapAlloc(al.Err)
}

// Scratch holds Forward's temporaries; one may serve many Acts.
type Scratch struct {
	XE, XH tensor.Tensor // [R, H] the two normed halves of X
	Act    tensor.Tensor // [R, I] swiglu(Gate, Up); empty: it overwrites Gate (no backward follows)
	halves []tensor.Tensor
	attn   nn.AttnActs
	mlp    nn.MLPActs
}

// NewScratch allocates Forward's temporaries for up to rows rows on dev;
// with inPlace the activation overwrites the gate (no backward follows).
func (l *Layer) NewScratch(dev tensor.Device, rows int, inPlace bool) (*Scratch, error) {
	h := l.G.Hidden
	al := tensor.Allocator{Dev: dev}
	s := &Scratch{XE: al.F32(rows, h), XH: al.F32(rows, h), halves: make([]tensor.Tensor, 2),
		attn: nn.AttnActs{Parts: make([]tensor.Tensor, 0, 3)}}
	if !inPlace {
		s.Act = al.F32(rows, l.G.Intermediate)
	}
	return s, wrapAlloc(al.Err)
}

// FCActs are what the EAGLE-3.1 norms before fc (Norms.FCNorm,
// Norms.NormBeforeFC) keep for up to R rows: the normed features fc reads,
// and the per-feature chunks of fc_norm. A plain EAGLE-3 layer's are empty:
// fc reads the features themselves.
type FCActs struct {
	// In holds the rows' normed features [R, 3H], fc's input.
	In tensor.Tensor
	// DIn holds the gradient at In for FCBackward (a trainer's only).
	DIn tensor.Tensor
	// parts are fc_norm's chunks of the features and normed their norms
	// [R, H] each; dparts their gradients (a trainer's only).
	parts, normed, dparts [Features]tensor.Tensor
	views                 []tensor.Tensor
}

// NewFCActs allocates FC's activations for up to rows rows on dev, with the
// gradient buffers of FCBackward when withGrad; nothing when the layer has
// no norm before fc.
func (l *Layer) NewFCActs(dev tensor.Device, rows int, withGrad bool) (*FCActs, error) {
	a := &FCActs{views: make([]tensor.Tensor, Features)}
	g := l.G
	if !g.FCNorm && !g.NormBeforeFC {
		return a, nil
	}
	h := g.Hidden
	al := tensor.Allocator{Dev: dev}
	a.In = al.F32(rows, Features*h)
	if withGrad {
		a.DIn = al.F32(rows, Features*h)
	}
	if g.FCNorm {
		for c := range Features {
			a.parts[c], a.normed[c] = al.F32(rows, h), al.F32(rows, h)
			if withGrad {
				a.dparts[c] = al.F32(rows, h)
			}
		}
	}
	return a, wrapAlloc(al.Err)
}

// chunks returns the first rows rows of ts as the views slice.
func (a *FCActs) chunks(ts *[Features]tensor.Tensor, rows int) []tensor.Tensor {
	for c := range ts {
		a.views[c] = ts[c].RowRange(0, rows)
	}
	return a.views
}

// FC computes the hidden input of the first step from the rows of fused
// target features feat [rows, 3H] into out's first rows: fc(feat) for plain
// EAGLE-3; fc over [RMS_0(a); RMS_1(b); RMS_2(c)] with fc_norm, each
// feature chunk normed on its own; fc(RMS(feat)) with norm_before_fc. a
// holds the normed features (NewFCActs; unused without such a norm).
func (l *Layer) FC(dev tensor.Device, out, feat tensor.Tensor, a *FCActs) {
	g, w := l.G, l.w
	rows := feat.Rows()
	eps := float32(g.RMSNormEps)
	switch {
	case g.FCNorm:
		in := a.In.RowRange(0, rows)
		dev.SplitCols(feat, a.chunks(&a.parts, rows))
		for c := range Features {
			dev.RMSNorm(a.normed[c].RowRange(0, rows), a.parts[c].RowRange(0, rows), w.FCNorm[c], eps)
		}
		dev.ConcatCols(in, a.chunks(&a.normed, rows))
		feat = in
	case g.NormBeforeFC:
		in := a.In.RowRange(0, rows)
		dev.RMSNorm(in, feat, w.FCInputNorm, eps)
		feat = in
	}
	l.fc.Forward(dev, out, feat)
}

// Forward runs the decoder layer over the first rows rows of a (inputs E,
// H, Pos; activations written), attending through attn.
func (l *Layer) Forward(dev tensor.Device, a *Acts, s *Scratch, rows int, attn nn.Attender) {
	w := l.w
	eps := float32(l.G.RMSNormEps)
	r := func(t tensor.Tensor) tensor.Tensor { return t.RowRange(0, rows) }
	e, hIn, x, pos := r(a.E), r(a.H), r(a.X), r(a.Pos)
	a1, n2, out := r(a.A1), r(a.N2), r(a.Out)
	xe, xh := r(s.XE), r(s.XH)
	dev.RMSNorm(xe, e, w.InputNorm, eps)
	dev.RMSNorm(xh, hIn, w.HiddenNorm, eps)
	s.halves[0], s.halves[1] = xe, xh
	dev.ConcatCols(x, s.halves)
	s.attn.Q, s.attn.K, s.attn.V, s.attn.O = a.Q, a.K, a.V, a.O
	l.attn.Forward(dev, a1, x, pos, &s.attn, attn, false)
	dev.Add(a1, hIn)
	dev.RMSNorm(n2, a1, w.PostNorm, eps)
	s.mlp = nn.MLPActs{Gate: a.Gate, Up: a.Up, Act: s.Act}
	l.mlp.Forward(dev, out, n2, &s.mlp, false)
	dev.Add(out, a1)
}

// Logits writes the draft-vocabulary logits [rows, N] of the rows of
// pre-norm outputs out into dst, the normed outputs into fn.
func (l *Layer) Logits(dev tensor.Device, dst, fn, out tensor.Tensor) {
	rows := out.Rows()
	fn = fn.RowRange(0, rows)
	dev.RMSNorm(fn, out, l.w.Norm, float32(l.G.RMSNormEps))
	l.lm.Forward(dev, dst, fn)
}

// Scale returns the attention's score scale 1/√head_dim, in float32.
func (l *Layer) Scale() float32 { return float32(1 / math.Sqrt(float64(l.G.HeadDim))) }

// Shape returns the attention's head layout.
func (l *Layer) Shape() tensor.AttnShape { return l.attn.Shape }

// GradScratch holds Backward's temporaries for up to R rows.
type GradScratch struct {
	MLP                nn.MLPScratch  // [R, I] each
	Attn               nn.AttnScratch // [R, heads*head_dim] each
	DN2, DA1, DXE, DXH tensor.Tensor  // [R, H]
	DX                 tensor.Tensor  // [R, 2H]
	halves             []tensor.Tensor
	attn               nn.AttnActs
	mlp                nn.MLPActs
}

// NewGradScratch allocates Backward's temporaries for up to rows rows on
// dev.
func (l *Layer) NewGradScratch(dev tensor.Device, rows int) (*GradScratch, error) {
	h, qw, I := l.G.Hidden, l.G.QDim(), l.G.Intermediate
	al := tensor.Allocator{Dev: dev}
	s := &GradScratch{MLP: nn.MLPScratch{Act: al.F32(rows, I), DAct: al.F32(rows, I), DGate: al.F32(rows, I), DUp: al.F32(rows, I)},
		DN2: al.F32(rows, h), DA1: al.F32(rows, h), DXE: al.F32(rows, h), DXH: al.F32(rows, h),
		Attn: nn.AttnScratch{DO: al.F32(rows, qw), DQ: al.F32(rows, qw)}, DX: al.F32(rows, 2*h), halves: make([]tensor.Tensor, 2)}
	return s, wrapAlloc(al.Err)
}

// LogitsBackward writes into dfn the gradient at Logits' normed outputs fn
// (over dlogits' rows), given dlogits at its output, and accumulates
// lm_head's gradient into gr.
func (l *Layer) LogitsBackward(dev tensor.Device, gr *Weights, dfn, dlogits, fn tensor.Tensor) {
	rows := dlogits.Rows()
	dfn = dfn.RowRange(0, rows)
	dev.Zero(dfn)
	l.lm.Backward(dev, dfn, gr.LMHead, tensor.Tensor{}, dlogits, fn.RowRange(0, rows))
}

// NormBackward accumulates into dout the gradient at the pre-norm outputs
// out (over their rows) through the final norm, given dfn at its output, and
// the norm's gradient into gr.
func (l *Layer) NormBackward(dev tensor.Device, gr *Weights, dout, dfn, out tensor.Tensor) {
	rows := out.Rows()
	dev.RMSNormBackward(dout.RowRange(0, rows), gr.Norm, dfn.RowRange(0, rows), out, l.w.Norm, float32(l.G.RMSNormEps))
}

// Backward back-propagates dOut, the gradient at a.Out, through the decoder
// layer over the first rows rows: it accumulates the parameter gradients
// into gr and writes the gradient at the hidden input a.H into dH. a.E must
// hold the rows' embeddings again (a caller sharing one embedding buffer
// between applications gathers them anew).
func (l *Layer) Backward(dev tensor.Device, gr *Weights, a *Acts, dOut, dH tensor.Tensor, rows int, attn nn.AttenderGrad, s *GradScratch) {
	w := l.w
	eps := float32(l.G.RMSNormEps)
	r := func(t tensor.Tensor) tensor.Tensor { return t.RowRange(0, rows) }
	dOut, dH = r(dOut), r(dH)
	dN2, dA1, dXE, dXH, dX := r(s.DN2), r(s.DA1), r(s.DXE), r(s.DXH), r(s.DX)
	n2, a1, x, pos := r(a.N2), r(a.A1), r(a.X), r(a.Pos)
	// Out = A1 + MLP(N2).
	dev.Zero(dN2)
	s.mlp = nn.MLPActs{Gate: a.Gate, Up: a.Up}
	l.mlp.Backward(dev, dN2, dOut, n2, &s.mlp, nn.MLPGrads{Gate: gr.Gate, Up: gr.Up, Down: gr.Down}, &s.MLP)
	dev.Copy(dA1, dOut)
	dev.RMSNormBackward(dA1, gr.PostNorm, dN2, a1, w.PostNorm, eps)
	// A1 = H + attention(X): the residual carries DA1 straight to H.
	dev.Copy(dH, dA1)
	dev.Zero(dX)
	s.attn = nn.AttnActs{Q: a.Q, K: a.K, V: a.V, O: a.O}
	l.attn.Backward(dev, dX, dA1, x, pos, &s.attn, attn, nn.AttnGrads{Q: gr.Q, K: gr.K, V: gr.V, O: gr.O}, &s.Attn)
	s.halves[0], s.halves[1] = dXE, dXH
	dev.SplitCols(dX, s.halves)
	dev.RMSNormBackward(tensor.Tensor{}, gr.InputNorm, dXE, r(a.E), w.InputNorm, eps)
	dev.RMSNormBackward(dH, gr.HiddenNorm, dXH, r(a.H), w.HiddenNorm, eps)
}

// FCBackward accumulates the gradients of fc and of the norms before it
// into gr given dH at fc's output, for the rows of features feat and the
// activations a of the FC that computed it (the features themselves are not
// trained, so no gradient flows past the norms).
func (l *Layer) FCBackward(dev tensor.Device, gr *Weights, dH, feat tensor.Tensor, a *FCActs) {
	g, w := l.G, l.w
	rows := feat.Rows()
	eps := float32(g.RMSNormEps)
	dH = dH.RowRange(0, rows)
	if !g.FCNorm && !g.NormBeforeFC {
		l.fc.Backward(dev, tensor.Tensor{}, gr.FC, tensor.Tensor{}, dH, feat)
		return
	}
	in, dIn := a.In.RowRange(0, rows), a.DIn.RowRange(0, rows)
	dev.Zero(dIn)
	l.fc.Backward(dev, dIn, gr.FC, tensor.Tensor{}, dH, in)
	if g.NormBeforeFC {
		dev.RMSNormBackward(tensor.Tensor{}, gr.FCInputNorm, dIn, feat, w.FCInputNorm, eps)
		return
	}
	// fc_norm: each chunk's norm sees its slice of dIn. The chunks of the
	// features are split anew (another FC may have reused a.parts since).
	dev.SplitCols(dIn, a.chunks(&a.dparts, rows))
	dev.SplitCols(feat, a.chunks(&a.parts, rows))
	for c := range Features {
		dev.RMSNormBackward(tensor.Tensor{}, gr.FCNorm[c], a.dparts[c].RowRange(0, rows), a.parts[c].RowRange(0, rows), w.FCNorm[c], eps)
	}
}

// wrapAlloc says where a failed allocation happened.
func wrapAlloc(err error) error {
	if err != nil {
		return fmt.Errorf("eagle3: %w", err)
	}
	return nil
}
