package tensor

import (
	"fmt"
	"math"
)

// Device is where a model's tensors live and its ops run. It owns the
// memory of the tensors it allocates (Alloc, Upload, NewKV) and every
// decision about how an op runs (kernels, threading, weight layouts), so
// that a caller writes a layer once as a list of ops and runs it on any
// device: the CPU device (pkg/tensor/cpu) today, a GPU device beside it later.
// Values cross between the host and a device only through Upload, Write,
// WriteI32 and Read (HostF32 lets a caller skip the copy where the device's
// memory is the host's).
//
// A device value belongs to one caller (a model, a draft) and is not safe for
// concurrent use: it holds the scratch of the op in flight, so that ops
// allocate nothing. Ops check shapes and panic on a mismatch, a caller's
// programming error; they never fail on values.
type Device interface {
	// Name says which device and kernels run, for example "cpu/openblas".
	Name() string
	// Sibling returns another device value on the same device (the same
	// memory, context and stream), with scratch of its own: a device value
	// serves one caller, and the callers of one run (a model, its drafts,
	// a trainer) share its memory through siblings.
	Sibling() Device

	// Alloc returns a zeroed [rows, cols] tensor of dtype dt in the device's
	// memory.
	Alloc(dt DType, rows, cols int) (Tensor, error)
	// Upload returns m as a tensor of the device, in m's dtype: a view of
	// m's values where the device's memory is the host's (the CPU device;
	// a memory-mapped checkpoint stays mapped), else a copy.
	Upload(m Matrix) (Tensor, error)
	// Write copies src (float32, len(src) a multiple of dst's columns) into
	// dst's first rows.
	Write(dst Tensor, src []float32)
	// WriteI32 copies src into the first values of the I32 tensor dst.
	WriteI32(dst Tensor, src []int32)
	// Read copies the float32 tensor src into dst.
	Read(dst []float32, src Tensor)
	// HostF32 returns the float32 tensor t's values as a host slice when
	// the device's memory is the host's, without a copy.
	HostF32(t Tensor) ([]float32, bool)

	// PrepareWeights gives the weights a caller multiplies by (all of them
	// at once: the device may size its layouts against their total) the
	// layouts their products run fastest in. The weights must not change
	// afterwards.
	PrepareWeights(ws ...*Weight)
	// MulT computes out[rows, n] = x[rows, k]·Wᵀ for the weight W [n, k],
	// or adds it to out when acc is true. Up to FewRows rows, each row's
	// result is the same whatever the other rows.
	MulT(out, x Tensor, w *Weight, acc bool)
	// RoundsInputs reports whether MulT of rows rows by a weight of dtype
	// dt rounds the input x to dt before multiplying (a GEMM with 16-bit
	// inputs, as a GPU's bf16 GEMM and the CPU's AVX512_BF16 one are),
	// instead of computing with float32 inputs.
	RoundsInputs(dt DType, rows int) bool
	// Gather writes row ids[i] of table, widened to float32, into row i of
	// out (an embedding lookup).
	Gather(out Tensor, table *Weight, ids []int)
	// GatherRows writes row rows[i] of src into row i of out.
	GatherRows(out, src Tensor, rows []int32)
	// AddScaledRows adds scale[i]·src's row i to dst's row rows[i], for
	// every i in order (i = 0, 1, ...): a mixture-of-experts layer's
	// combine, each expert's outputs for the rows routed to it, weighted by
	// their routing weights, added into the layer's output. src and dst are
	// float32 with dst's columns, src holding at least len(rows) rows (row i
	// for rows[i]; it must not overlap dst), and len(scale) == len(rows).
	// Each value is computed as dst = dst + float32(scale·src): the product
	// rounded to float32 first, then the sum (no fused multiply-add), as
	// torch computes `x * w` and then `index_add_`, so that every device
	// gets the same bits. rows may repeat (a caller need not deduplicate):
	// the additions into a repeated row happen in index order, as
	// sequential float32 adds, so the result is deterministic. rows and
	// scale are host slices (like GatherRows' rows), which the device may
	// copy; the call allocates nothing on the host once warm. A row index
	// out of range, or a shape or dtype mismatch, panics (CheckAddScaledRows).
	AddScaledRows(dst, src Tensor, rows []int32, scale []float32)
	// HeadMatMul computes, for every head h < heads, out's head-h block of
	// columns from x's:
	//
	//	out[r, h·n:(h+1)·n] = x[r, h·k:(h+1)·k] · W_h     (transW false)
	//	out[r, h·n:(h+1)·n] = x[r, h·k:(h+1)·k] · W_hᵀ    (transW true)
	//
	// where W_h is rows [h·a, (h+1)·a) of w ([heads·a, b] float32,
	// row-major) and (k, n) is (a, b) without transposition, (b, a) with it;
	// x is [R, heads·k] and out [R, heads·n] (at least R rows), float32,
	// overwritten. DeepSeek-V3's absorbed multi-head latent attention
	// multiplies each head's query by its own slice of kv_b_proj (into the
	// latent space) and each head's latent output by another slice (out of
	// it): a batch of small products over the heads, strided in x and out,
	// which one call runs without splitting x or gathering out per head.
	// The products accumulate in float32. Up to FewRows rows each row's
	// result is the same whatever the other rows (as MulT's), so that a
	// verified draft scores each row as a decode step would. A shape or
	// dtype mismatch panics (CheckHeadMatMul).
	HeadMatMul(out, x, w Tensor, heads int, transW bool)
	// Copy copies src into dst (the same number of values).
	Copy(dst, src Tensor)
	// SplitCols copies consecutive column blocks of src into the dsts, in
	// order: dst i gets dst i's width of columns (a fused product's parts).
	// (A slice, not variadic arguments: a caller that keeps it allocates
	// nothing per call.)
	SplitCols(src Tensor, dsts []Tensor)

	// RMSNorm computes each row of out as the row of x over
	// sqrt(mean(x²)+eps), times w (Hugging Face's LlamaRMSNorm in float32,
	// the mean accumulated in float64); out may be x.
	RMSNorm(out, x, w Tensor, eps float32)
	// RoPE rotates x [rows, heads·HeadDim] in place by r's angles at the
	// positions pos (I32, one per row).
	RoPE(x Tensor, heads int, pos Tensor, r *Rotary)
	// Scale multiplies x by s in place.
	Scale(x Tensor, s float32)
	// AddBias adds the row b to every row of x.
	AddBias(x, b Tensor)
	// SwiGLU computes out = silu(gate)·up element-wise. With up empty, gate
	// holds both side by side in each row ([rows, 2·I]: a fused product)
	// and out is [rows, I].
	SwiGLU(out, gate, up Tensor)
	// GELUTanhGLU computes out = gelu_tanh(gate)·up element-wise, with
	// SwiGLU's conventions (up empty: gate is [rows, 2·I], each row's gate
	// part first, its up part second), where gelu_tanh(x) =
	// 0.5·x·(1+tanh(√(2/π)·(x+0.044715·x³))) in float32, PyTorch's
	// gelu(approximate='tanh'): the MLP activation of Gemma's targets. It is
	// forward only: it serves frozen target layers, which training never
	// differentiates, so no backward exists.
	GELUTanhGLU(out, gate, up Tensor)
	// Softcap replaces each value v of x with c·tanh(v/c) in place (c > 0),
	// in float32 and in Hugging Face's order (divide, tanh, multiply):
	// Gemma-2's final logit soft-capping, which bounds the logits to (-c, c)
	// before any softmax or loss reads them.
	Softcap(x Tensor, c float32)
	// ClampedSwiGLU computes gpt-oss's expert activation element-wise, with
	// SwiGLU's conventions (up empty: gate is [rows, 2·I], each row's gate
	// part first, its up part second): in float32 and in this order,
	//
	//	g = min(gate, limit); u = clamp(up, -limit, limit)
	//	out = (u + 1) · (g · sigmoid(alpha·g))
	//
	// as Transformers' GptOssExperts computes it (gate.clamp(max=limit),
	// up.clamp(-limit, limit), glu = gate·sigmoid(gate·alpha), (up+1)·glu).
	// The clamps keep the experts' activations bounded, which a plain SwiGLU
	// would not reproduce; out may be gate. Like GELUTanhGLU it is forward
	// only: it serves frozen target layers, which training never
	// differentiates.
	ClampedSwiGLU(out, gate, up Tensor, alpha, limit float32)

	// Training: products of either operand transposed, and the backward
	// passes of the ops above. A backward ACCUMULATES into the gradients it
	// is given (a parameter used twice receives both contributions); an
	// empty gradient tensor means it is not needed.

	// MatMul computes out[m, n] = alpha·op(a)·op(b), or adds it to out when
	// acc is true, where op(x) is x or xᵀ (trans). A product a·bᵀ with alpha
	// 1 of at most FewRows rows computes each row as MulT does, whatever
	// the other rows.
	MatMul(out, a, b Tensor, transA, transB bool, alpha float32, acc bool)
	// RMSNormBackward accumulates the gradients of RMSNorm(out, x, w, eps)
	// into dx and dw, given dout at its output.
	RMSNormBackward(dx, dw, dout, x, w Tensor, eps float32)
	// RoPEBackward rotates the gradient x at RoPE's output back in place,
	// giving the gradient at its input (the rotation's transpose: the
	// opposite angles).
	RoPEBackward(x Tensor, heads int, pos Tensor, r *Rotary)
	// SwiGLUBackward accumulates the gradients of SwiGLU(out, gate, up)
	// (separate gate and up) into dgate and dup, given dout at its output.
	SwiGLUBackward(dgate, dup, dout, gate, up Tensor)
	// AddSiLU adds silu(z) = z·sigmoid(z) to out element-wise (a residual
	// block's activation), with SwiGLU's arithmetic.
	AddSiLU(out, z Tensor)
	// SiLUBackward accumulates dout·silu'(z) into dz.
	SiLUBackward(dz, dout, z Tensor)
	// Add adds src to dst element-wise (a residual).
	Add(dst, src Tensor)
	// SumRows adds the sum of x's rows to the one-row dst (a bias's
	// gradient).
	SumRows(dst, x Tensor)
	// ConcatCols writes the srcs side by side into dst's rows, in order:
	// SplitCols's inverse.
	ConcatCols(dst Tensor, srcs []Tensor)

	// Zero sets x's values to zero.
	Zero(x Tensor)
	// SumSquares returns the sum of the squares of x's values, accumulated
	// in float64 (a gradient norm's).
	SumSquares(x Tensor) float64
	// AdamW applies one AdamW update to the parameter p with gradient g and
	// moments m and v (all float32, the same length), in place.
	AdamW(p, g, m, v Tensor, s AdamWStep)

	// Losses, selection and casts.
	//
	// The losses take the logits as [rows, v] float32 tensors, the targets
	// as an I32 tensor of one value per row and the weights as a float32
	// tensor of one value per row (empty: weight 1 for every row). Their
	// sums run in float64 over a split of the rows that depends on rows and
	// v only, so the result does not depend on how a device schedules it.

	// Softmax replaces each row of x with softmax(x·scale) (a distribution
	// at temperature 1/scale): the float32 exponentials of (x - max)·scale
	// (-Inf values become 0) over their sum, taken in float64.
	Softmax(x Tensor, scale float32)
	// ArgMax writes into idx[r] the column of row r's first largest value.
	// idx is a host slice: the indices are a value per row that the caller
	// tallies on the host.
	ArgMax(idx []int32, x Tensor)
	// GatherCols writes column cols[i] of src's rows into column i of out's
	// (cols an I32 tensor of out's width: a vocabulary's subset).
	GatherCols(out, src, cols Tensor)
	// CrossEntropy returns the weighted sum over rows of
	// -log softmax(logits[r])[targets[r]], skipping rows whose weight is
	// zero or whose target is negative. When dlogits is not empty it
	// receives d(loss)/d(logits) = w_r·(softmax(logits[r]) - onehot(t_r)),
	// overwritten (zero in skipped rows); dlogits may be logits itself, whose
	// values are then consumed.
	CrossEntropy(dlogits, logits, targets, weights Tensor) float64
	// SoftCrossEntropy returns the weighted sum over rows of
	// -Σ_j p[r,j]·log softmax(logits[r])[j] for the target distributions p
	// ([rows, v], a row need not sum to 1), skipping rows of zero weight.
	// When dlogits is not empty it receives w_r·(softmax(logits[r])·Σ_j p[r,j]
	// - p[r]), overwritten; it may be logits itself.
	SoftCrossEntropy(dlogits, logits, p, weights Tensor) float64
	// LKLoss returns the weighted sum over rows of the LK loss l (see LK)
	// of logits against the target distributions p ([rows, v]; α is taken
	// over p as given, which need not sum to 1: a draft vocabulary's share
	// of the target), and the weighted sum of the rows' α, skipping rows of
	// zero weight. q's values are the float32 exponentials over their
	// float64 sum, as SoftCrossEntropy's, and α, the losses and λ's argument
	// are float64 (λ's exponential is the float32 one). When dlogits is not
	// empty it receives w_r·dL_r/dlogits[r] (λ held constant), overwritten
	// (zero in skipped rows); it may be logits itself.
	LKLoss(dlogits, logits, p, weights Tensor, l LK) (loss, alpha float64)
	// LKLossHard is LKLoss against one-hot targets (an I32 tensor of one
	// token per row), skipping rows whose weight is zero or whose target is
	// negative, as CrossEntropy: α is then q's probability of the target.
	LKLossHard(dlogits, logits, targets, weights Tensor, l LK) (loss, alpha float64)
	// CrossEntropyEval is CrossEntropy's forward for evaluation: logits stay
	// intact, and row r's loss -log softmax(logits[r])[t_r] goes to
	// rowLoss[r] and the target's rank (how many logits are strictly larger:
	// 0 is a top-1 hit) to rank[r]; a row whose target is negative gets loss
	// 0 and rank -1. The destinations are host slices: they are a few
	// values per row that the caller tallies on the host (a device copies
	// them back, small beside the logits), and a row's loss stays in
	// float64, as the sums over an evaluation's rows need it.
	CrossEntropyEval(rowLoss []float64, rank []int32, logits, targets Tensor)
	// TopK writes into idx, best first, the column indices of the len(idx)
	// largest values of the one-row tensor x, ties to the lower index, and
	// returns how many it wrote: min(len(idx), x's columns). idx is a host
	// slice the caller keeps, so that a decoding loop allocates nothing.
	TopK(idx []int, x Tensor) int
	// SampleRows draws a token for every row of logits ([rows, V] float32)
	// into ids[r] (a host slice of at least rows values), as SampleRow
	// does: the argmax at temperature 0, else a draw from
	// softmax(logits/temperature) by the inverse transform of u[r], a
	// uniform in [0, 1) the caller drew from the row's own random stream
	// (so that a sequence's randomness stays its own). A row with a NaN or
	// +Inf value, or only -Inf values, gets -1. It is decoding's sampling
	// step on the device: only the ids (not the logits) come back to the
	// host. Top-k, top-p and min-p are not applied (a caller that needs them
	// samples on the host). A device equals SampleRow at temperature 0;
	// above, its sums may round differently (a GPU's block reductions), so
	// a draw can differ when u falls within rounding of a boundary between
	// two tokens. It allocates nothing on the host once warm; an invalid
	// call panics (CheckSampleRows).
	SampleRows(ids []int32, logits Tensor, temperature float64, u []float64)
	// Cast writes src's values into dst (the same number of values) in
	// dst's dtype, one of F32, BF16 and F16: narrowing rounds to the nearest
	// value, ties to even (F32ToBF16's and F32ToF16's rounding), and
	// widening is exact.
	Cast(dst, src Tensor)

	// NewKV allocates a KV cache of capacity positions for layers layers
	// of kvDim keys and values each, laid out as the device's Attend reads
	// it.
	NewKV(layers, kvDim, capacity int) (*KV, error)
	// KVWrite stores the rows of k and v (both [r, kvDim]) at positions
	// row..row+r-1 of layer l.
	KVWrite(kv *KV, l, row int, k, v Tensor)
	// KVMove copies position src to position dst in every layer.
	KVMove(kv *KV, dst, src int)
	// Attend computes the grouped-query attention of every sequence of a
	// pass at layer l: for each, its T new rows of q (already scaled by
	// 1/√d) attend to the N committed positions of its cache and to the new
	// positions its mask allows, and out gets the result in the same rows.
	// shape.Softcap caps the scores, shape.Window limits each row to the
	// last Window positions and shape.Sinks adds each head's sink logit to
	// every row's softmax (see AttnShape).
	Attend(out, q Tensor, l int, shape AttnShape, seqs []AttnSeq)

	// Training-time-test attention (EAGLE-3's unrolled draft).

	// AttendTTT computes step k = len(keys)-1 of the attention of a draft
	// unrolled over k+1 steps for training, over the packed sequences seqs.
	// keys[m] and vals[m] hold step m's RoPE'd keys and values [R,
	// KVHeads·HeadDim] (len(vals) = len(keys)); q [R, Heads·HeadDim] holds
	// step k's RoPE'd queries, NOT scaled: the op scales by 1/√HeadDim
	// (float32(1/math.Sqrt(HeadDim))) itself, applied to each score q·k as
	// scale·(q·k), because the backward needs the unscaled q and prescaling
	// q would round the scores differently. Row r, at position i of its
	// sequence, attends, per query head h and its key/value head
	// h/(Heads/KVHeads), to
	//
	//	s_j = scale·q[r]·keys[0][j]   for the sequence's rows j at positions <= i
	//	e_m = scale·q[r]·keys[m][r]   for m = 1..k (the same row of later steps)
	//
	// (causal attention over the keys the target's features produced, then
	// the draft's own earlier guesses along this row's chain, as the
	// engines attend at inference), and gets, with (P, pe) the float32
	// softmax over the concatenation,
	//
	//	out[r] = Σ_j P_j·vals[0][j] + Σ_m pe_m·vals[m][r]
	//
	// lse [R, Heads] gets each row and head's log-sum-exp of the scores,
	// which AttendTTTBackward reads instead of keeping the probabilities.
	// Rows outside seqs are left as they were. shape's Softcap and Window
	// must be zero and its Sinks empty (as for AttendTTTBackward): the
	// drafts trained here are
	// Llama-style layers, and a device panics on a shape that sets them
	// rather than silently ignore them.
	AttendTTT(out, lse, q Tensor, keys, vals []Tensor, shape AttnShape, seqs []Span)
	// AttendTTTBackward is the derivative of AttendTTT: given dout, the
	// gradient at the output out of AttendTTT(out, lse, q, keys, vals, ...)
	// (the same arguments), it ADDS to dq (step k's queries) and to dkeys[m]
	// and dvals[m] (every step's keys and values, m = 0..k) their
	// gradients, so that the backward of steps k' > k, which also attend to
	// step m's keys, accumulate into the same tensors. It recomputes the
	// probabilities from lse.
	AttendTTTBackward(dq Tensor, dkeys, dvals []Tensor, dout, out, lse, q Tensor, keys, vals []Tensor, shape AttnShape, seqs []Span)
}

// Allocator allocates tensors on a device for a caller that allocates many
// at once and checks for an error once: after the first failure it returns
// empty tensors and keeps that error in Err.
type Allocator struct {
	Dev Device
	Err error
}

// Alloc returns a zeroed [rows, cols] tensor of dtype dt (Device.Alloc), or
// an empty one once an allocation has failed.
func (a *Allocator) Alloc(dt DType, rows, cols int) Tensor {
	if a.Err != nil {
		return Tensor{}
	}
	t, err := a.Dev.Alloc(dt, rows, cols)
	if err != nil {
		a.Err = err
	}
	return t
}

// F32 is Alloc of a float32 tensor.
func (a *Allocator) F32(rows, cols int) Tensor { return a.Alloc(F32, rows, cols) }

// AdamWStep is one AdamW update's scalars (torch.optim.AdamW's, non-amsgrad,
// in float32): each value is updated as
//
//	m = Beta1·m + OneMinusBeta1·g
//	v = Beta2·v + OneMinusBeta2·g²
//	p = p·Decay - StepSize·m / (√v / SqrtBC2 + Eps)
//
// where Decay = 1 - lr·weight_decay, StepSize = lr / (1 - β1^t) and SqrtBC2 =
// √(1 - β2^t) at step t, in that order of operations.
type AdamWStep struct {
	Decay, Beta1, Beta2, OneMinusBeta1, OneMinusBeta2, StepSize, SqrtBC2, Eps float32
}

// AttnShape is an attention's head layout and the variants of its scores
// that Attend applies (Gemma-2/3's soft-capping and sliding windows,
// gpt-oss's attention sinks); each is off at its zero value, where Attend
// computes exactly what it did before they existed.
type AttnShape struct {
	// Heads and KVHeads are the query and key/value heads; HeadDim their
	// width.
	Heads, KVHeads, HeadDim int
	// Softcap, when not 0, replaces each score s (q already scaled by the
	// caller) with Softcap·tanh(s/Softcap) before the mask and softmax, in
	// float32 and in Hugging Face's order (divide, tanh, multiply): Gemma-2's
	// attn_logit_softcapping.
	Softcap float32
	// Window, when not 0, is a sliding window as Hugging Face masks it: a
	// row at position p sees position j only if p-j < Window, besides the
	// causal or tree mask. A chain's row i is at position N+i and slot j at
	// position j; a tree's row is at position N+depth, depth being its set
	// mask entries less one, and sees committed slot j iff
	// j >= N+depth-Window+1 and, of the tree slots its mask sets, its last
	// Window ones (its ancestors at depth >= depth-Window+1, and itself).
	// Each row thus has a first visible slot (WindowStart). A row must see
	// itself: Window is at least 1 when set, and a negative Window panics.
	Window int
	// Sinks, when not empty, is a [1, Heads] float32 tensor on the device
	// that Attend runs on: gpt-oss's attention sinks, a learned logit s_h
	// per query head that joins each row's softmax as one more score
	// without a value, so that a head can put weight on "nothing" instead
	// of on the keys it sees. As Hugging Face's eager attention
	// concatenates s_h to the scores (scaled, capped) and drops the sink's
	// probability after the softmax, a row's output becomes
	//
	//	out = Σ_j e^(s_j-M)·v_j / (Σ_j e^(s_j-M) + e^(s_h-M)),  M = max(max_j s_j, s_h)
	//
	// over the positions j the row sees (mask and Window apply to the keys
	// only: the sink is seen by every row). The sink enters each row's
	// softmax once, whatever the device splits the row's keys into, so a
	// draft node still gets its decode step's bits.
	Sinks Tensor
}

// WindowStart returns the first slot that a row sees under a sliding window
// of w positions (w > 0, see AttnShape.Window). For a chain's row at
// position p (mk nil) it is max(0, p-w+1). For a tree's row, mk is its row
// of the AttnSeq's Mask (over the pending and new slots after the n
// committed ones): n+depth-w+1 (at least 0) while the window reaches the
// committed slots, else the slot of its ancestor at depth depth-w+1. Every
// device takes a row's window from it, so that all agree on what a row
// sees; it runs once per row of a pass and allocates nothing.
func WindowStart(mk []bool, n, p, w int) int {
	if mk == nil {
		return max(0, p-w+1)
	}
	depth := -1
	for _, ok := range mk {
		if ok {
			depth++
		}
	}
	first := depth - w + 1 // the shallowest visible ancestor's depth
	if first <= 0 {
		return max(0, n+depth-w+1)
	}
	k := 0
	for c, ok := range mk {
		if ok {
			if k == first {
				return n + c
			}
			k++
		}
	}
	return n + len(mk) // unreachable: first <= depth
}

// CheckAttnShape panics unless shape's Window is 0 or positive, its
// Softcap is 0 or positive and finite, and its Sinks empty or a [1, Heads]
// float32 tensor: each is a caller's programming error, which the devices
// report alike.
func CheckAttnShape(op string, shape AttnShape) {
	if s := shape.Sinks; !s.Empty() && (s.DType() != F32 || s.Rows() != 1 || s.Cols() != shape.Heads) {
		panic(fmt.Sprintf("tensor: %s: attention sinks are %dx%d %s, want 1x%d float32 (one per query head)", op, s.Rows(), s.Cols(), s.DType(), shape.Heads))
	}
	if shape.Window < 0 {
		panic(fmt.Sprintf("tensor: %s: attention window %d is negative (0 is off; a row must see itself)", op, shape.Window))
	}
	if !(shape.Softcap >= 0) || math.IsInf(float64(shape.Softcap), 1) {
		panic(fmt.Sprintf("tensor: %s: attention softcap %v (0 is off; else positive and finite)", op, shape.Softcap))
	}
}

// AttnSeq is one sequence's share of an Attend call.
type AttnSeq struct {
	// KV is the sequence's cache, whose positions N..N+T-1 hold the new
	// rows' keys and values.
	KV *KV
	// Row0 is the sequence's first row in q and out; T its new rows; N
	// the committed positions before them.
	Row0, T, N int
	// P is the number of pending positions N..N+P-1 between the committed
	// ones and the new rows (a draft tree's earlier levels, whose keys and
	// values are cached already), which the new rows, at positions
	// N+P..N+P+T-1, see through Mask only; 0 for a chain or a whole tree.
	P int
	// Mask is nil for a chain (P = 0): new row i attends causally (to
	// positions up to N+i). For a tree it is the [T, P+T] ancestor mask:
	// row i attends to the committed positions and to position N+c where
	// Mask[i·(P+T)+c].
	Mask []bool
}

// Rotary holds the rotation tables of rotate_half RoPE (Hugging Face Llama's
// convention: within each head of HeadDim values, value i < RotDims()/2
// pairs with value i + RotDims()/2 and turns by pos·InvFreq[i]) in a
// device's memory; positions from MaxPos on are computed from InvFreq.
type Rotary struct {
	HeadDim, MaxPos int
	// Dims is the number of rotated values per head (even, at most
	// HeadDim); 0 means HeadDim, so that tables built before partial
	// rotaries keep their meaning. A partial rotary (Phi-3/Phi-4's
	// partial_rotary_factor) rotates each head's first Dims values as a
	// head of Dims values (Hugging Face's q[..., :rotary_dim], then
	// rotate_half on that part) and leaves values Dims..HeadDim-1 as they
	// are.
	Dims int
	// AttnFactor, when not 0 (0 means 1), multiplies every cos and sin, of
	// the tables and of the positions past MaxPos computed on the fly
	// (LongRoPE's and YaRN's attention factor, which Hugging Face folds into
	// its cos and sin): the tables hold the plain RoPEAngle values and the
	// device multiplies them, in float32, as it reads them.
	AttnFactor float32
	// Cos and Sin are [MaxPos, RotDims()/2], InvFreq [1, RotDims()/2].
	Cos, Sin, InvFreq Tensor
}

// RotDims returns the rotated values per head: Dims, or HeadDim when Dims
// is 0.
func (r *Rotary) RotDims() int {
	if r.Dims == 0 {
		return r.HeadDim
	}
	return r.Dims
}

// Factor returns the multiplier of cos and sin: AttnFactor, or 1 when it is
// 0 (multiplying by 1 changes no value, so a kernel may always multiply).
func (r *Rotary) Factor() float32 {
	if r.AttnFactor == 0 {
		return 1
	}
	return r.AttnFactor
}

// Check panics unless r describes a rotary the devices apply: HeadDim
// positive, RotDims() even, positive and at most HeadDim, and tables of at
// least RotDims()/2 values per position (a caller's programming error
// otherwise). op names the op in the message.
func (r *Rotary) Check(op string) {
	d := r.RotDims()
	half := d / 2
	if r.HeadDim <= 0 || d <= 0 || d%2 != 0 || d > r.HeadDim || r.MaxPos < 0 || r.InvFreq.Len() < half ||
		r.Cos.Len() < r.MaxPos*half || r.Sin.Len() < r.MaxPos*half {
		panic(fmt.Sprintf("tensor: %s: a rotary of %d of %d values per head with %d inverse frequencies and tables of %d and %d values for %d positions",
			op, d, r.HeadDim, r.InvFreq.Len(), r.Cos.Len(), r.Sin.Len(), r.MaxPos))
	}
}

// Tensor is a row-major [rows, cols] array of one dtype in a device's
// memory. It is a small value: copies and RowRange views share the values.
// The zero Tensor is empty.
type Tensor struct {
	dt         DType
	rows, cols int
	// The CPU device's storage: the slice of dt's kind holds the values.
	f32 []float32
	u16 []uint16
	i32 []int32
	// Another device's storage: the address of the first value in its
	// memory (OnDevice), which the host never dereferences.
	addr uint64
}

// DType returns the tensor's element type.
func (t Tensor) DType() DType { return t.dt }

// Rows returns the tensor's number of rows.
func (t Tensor) Rows() int { return t.rows }

// Cols returns the tensor's number of columns.
func (t Tensor) Cols() int { return t.cols }

// Len returns the number of values, rows·cols.
func (t Tensor) Len() int { return t.rows * t.cols }

// Empty reports whether the tensor has no values.
func (t Tensor) Empty() bool { return t.rows == 0 || t.cols == 0 }

// RowRange returns rows [lo, hi) as a tensor viewing the same values.
func (t Tensor) RowRange(lo, hi int) Tensor {
	if lo < 0 || hi < lo || hi > t.rows {
		panic(fmt.Sprintf("tensor: rows [%d, %d) of a tensor of %d rows", lo, hi, t.rows))
	}
	v := t
	v.rows = hi - lo
	a, b := lo*t.cols, hi*t.cols
	if t.addr != 0 {
		v.addr = t.addr + uint64(a*t.dt.Size())
		return v
	}
	switch t.dt {
	case F32:
		v.f32 = t.f32[a:b:b]
	case I32:
		v.i32 = t.i32[a:b:b]
	default:
		v.u16 = t.u16[a:b:b]
	}
	return v
}

// Reshape returns the tensor's values as [rows, cols] (the same number of
// values), viewing the same values.
func (t Tensor) Reshape(rows, cols int) Tensor {
	if rows*cols != t.Len() {
		panic(fmt.Sprintf("tensor: reshape of %dx%d to %dx%d", t.rows, t.cols, rows, cols))
	}
	v := t
	v.rows, v.cols = rows, cols
	return v
}

// KV is one sequence's key/value cache on a device: for every layer, the
// keys and values of positions [0, Cap) of KVDim values each, in the layout
// the device's Attend reads. It holds memory only; which positions are
// committed is the caller's (pkg/kvcache).
type KV struct {
	kvDim, cap int
	// The CPU device's layout, per layer: K and V [cap, kvDim] row-major,
	// and K transposed [kvDim, cap] for the few-row attention's scores.
	k, v, kt [][]float32
	// Another device's memory for the cache, in a value of its own.
	storage any
}

// Storage returns the value a device gave NewDeviceKV (nil for the CPU
// device's caches).
func (kv *KV) Storage() any { return kv.storage }

// Cap returns the cache's capacity in positions.
func (kv *KV) Cap() int { return kv.cap }

// KVDim returns the keys and values per position and layer.
func (kv *KV) KVDim() int { return kv.kvDim }

// K, V and KT return layer l's keys [Cap, KVDim], values [Cap, KVDim] and
// keys transposed [KVDim, Cap] as host slices: the CPU device's layout, for
// tests that inspect the cache.
func (kv *KV) K(l int) []float32 { return kv.k[l] }

// V returns layer l's values; see K.
func (kv *KV) V(l int) []float32 { return kv.v[l] }

// KT returns layer l's keys transposed; see K.
func (kv *KV) KT(l int) []float32 { return kv.kt[l] }

// MatMulShape returns the sizes of Device.MatMul's product op(a)·op(b): m
// rows and n columns, and the inner sizes k of op(a) and kb of op(b), which
// a valid product has equal. Every device checks its arguments with it.
func MatMulShape(a, b Tensor, transA, transB bool) (m, n, k, kb int) {
	m, k = a.rows, a.cols
	if transA {
		m, k = k, m
	}
	n, kb = b.cols, b.rows
	if transB {
		n, kb = b.rows, b.cols
	}
	return m, n, k, kb
}

// CheckAddScaledRows panics unless Device.AddScaledRows(dst, src, rows,
// scale) is a valid call: dst and src float32, one scale per row index, src
// holding at least len(rows) rows of dst's columns (any src when rows is
// empty: the call is a no-op) and every index a row of dst. Every device
// checks its arguments with it, so that a caller's programming error panics
// the same way, before anything is copied or launched, on each of them. op
// names the device's op in the message.
func CheckAddScaledRows(op string, dst, src Tensor, rows []int32, scale []float32) {
	n := len(rows)
	if dst.dt != F32 || src.dt != F32 {
		panic(fmt.Sprintf("tensor: %s of a %s tensor into a %s one, want F32", op, src.dt, dst.dt))
	}
	if len(scale) != n || (n > 0 && (src.rows < n || src.cols != dst.cols)) {
		panic(fmt.Sprintf("tensor: %s of %d rows with %d scales from a %dx%d tensor into a %dx%d one",
			op, n, len(scale), src.rows, src.cols, dst.rows, dst.cols))
	}
	for _, r := range rows {
		if r < 0 || int(r) >= dst.rows {
			panic(fmt.Sprintf("tensor: %s into row %d of a tensor of %d rows", op, r, dst.rows))
		}
	}
}

// CheckHeadMatMul panics unless Device.HeadMatMul(out, x, w, heads, transW)
// is a valid call: every tensor float32, heads positive and dividing w's
// rows, x's columns heads·k and out's heads·n, out holding at least x's
// rows. It returns the rows R and each head's k and n. Every device checks
// its arguments with it, so that a caller's programming error panics the
// same way, before anything runs, on each of them. op names the device's op
// in the message.
func CheckHeadMatMul(op string, out, x, w Tensor, heads int, transW bool) (rows, k, n int) {
	if out.dt != F32 || x.dt != F32 || w.dt != F32 {
		panic(fmt.Sprintf("tensor: %s of a %s x by a %s weight into a %s out, want F32", op, x.dt, w.dt, out.dt))
	}
	if heads <= 0 || w.rows%heads != 0 {
		panic(fmt.Sprintf("tensor: %s of %d heads over a weight of %d rows", op, heads, w.rows))
	}
	k, n = w.rows/heads, w.cols
	if transW {
		k, n = n, k
	}
	if x.cols != heads*k || out.cols != heads*n || out.rows < x.rows {
		panic(fmt.Sprintf("tensor: %s of %d heads (transposed %v) of %dx%d x by a %dx%d weight into %dx%d",
			op, heads, transW, x.rows, x.cols, w.rows, w.cols, out.rows, out.cols))
	}
	return x.rows, k, n
}
