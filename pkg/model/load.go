package model

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/arch"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Load opens the Hugging Face checkpoint directory dir and loads its model
// onto dev (the CPU device when nil): FromWeights over the checkpoint's files,
// which the model keeps mapped while it reads 16-bit weights from them.
func Load(dir string, dev tensor.Device) (*Model, error) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	return FromWeights(ck.Config, ck.Weights, dev)
}

// WeightSource is what the loader needs from a tensor store; a
// *safetensors.Set is one.
type WeightSource interface {
	Info(name string) (safetensors.Info, bool)
	Float32Into(name string, dst []float32) error
	// Raw returns a tensor's little-endian bytes, which stay valid until
	// Close; the tensors of one file lie in one contiguous range of memory
	// (a file mapped whole), which a view of several may span.
	Raw(name string) ([]byte, safetensors.Info, error)
	// Close releases the store.
	Close() error
}

// binding ties one weight field to its checkpoint tensor name and the shape the
// config implies: a matrix (mat, which products read in the checkpoint's
// dtype) or a vector (vec: norm weights and biases, always float32).
type binding struct {
	name  string
	shape []int
	mat   *tensor.Matrix
	vec   *[]float32
	raw   *[]uint8 // bytes read as stored (MXFP4 blocks and scales)
}

// bindings lists every tensor of the model in its family's order
// (arch.Family.Tensors, which keeps the weights of fused products adjacent),
// each with the field it fills.
func (m *Model) bindings() []binding {
	ts := m.fam.Tensors(m.Config.Dims())
	b := make([]binding, len(ts))
	for i, t := range ts {
		if raw := m.rawField(t); raw != nil {
			b[i] = binding{name: t.Name, shape: t.Shape, raw: raw}
			continue
		}
		mat, vec := m.field(t)
		b[i] = binding{name: t.Name, shape: t.Shape, mat: mat, vec: vec}
	}
	return b
}

// field returns the weight field a tensor fills (a matrix or a vector), and
// sets the sizes of the linear layer a weight belongs to. Roles without a
// field here (a family's extra norms) are refused by newModel before any
// binding.
func (m *Model) field(t arch.Tensor) (*tensor.Matrix, *[]float32) {
	var l *Layer
	if t.Layer >= 0 {
		l = &m.Layers[t.Layer]
		if m.fam.MLA {
			if mat, vec := l.mlaField(t); mat != nil || vec != nil {
				return mat, vec
			}
		}
		if lin, bias := l.linear(t.Role); lin != nil {
			if bias {
				return nil, &lin.B
			}
			lin.Out, lin.In = t.Shape[0], t.Shape[1]
			return &lin.W, nil
		}
	}
	switch t.Role {
	case arch.Embed:
		return &m.Embed, nil
	case arch.FinalNorm:
		return nil, &m.Norm
	case arch.LMHead:
		return &m.LMHead, nil
	case arch.AttnNorm:
		return nil, &l.AttnNorm
	case arch.MLPNorm:
		return nil, &l.MLPNorm
	case arch.RouterBias:
		l.expertLinear(arch.Tensor{Role: arch.Router}, m.Config.Experts)
		return nil, &l.MoE.Bias
	case arch.RouterLinearBias:
		return nil, &l.expertLinear(arch.Tensor{Role: arch.Router}, m.Config.Experts).B
	case arch.ExpertsGateUp:
		l.expertLinear(arch.Tensor{Role: arch.Router}, m.Config.Experts)
		return &l.MoE.GateUp, nil
	case arch.ExpertsDown:
		l.expertLinear(arch.Tensor{Role: arch.Router}, m.Config.Experts)
		return &l.MoE.Down, nil
	case arch.ExpertsGateUpBias:
		l.expertLinear(arch.Tensor{Role: arch.Router}, m.Config.Experts)
		return nil, &l.MoE.GateUpBias
	case arch.ExpertsDownBias:
		l.expertLinear(arch.Tensor{Role: arch.Router}, m.Config.Experts)
		return nil, &l.MoE.DownBias
	case arch.Sinks:
		return nil, &l.Attn.Sinks
	case arch.Router, arch.ExpertGate, arch.ExpertUp, arch.ExpertDown, arch.SharedGate, arch.SharedUp, arch.SharedDown:
		lin := l.expertLinear(t, m.Config.Experts)
		lin.Out, lin.In = t.Shape[0], t.Shape[1]
		return &lin.W, nil
	case arch.QKVProj:
		return &l.Attn.QKV, nil
	case arch.GateUpProj:
		return &l.MLP.GateUp, nil
	case arch.AttnOutNorm:
		return nil, &l.AttnOutNorm
	case arch.MLPOutNorm:
		return nil, &l.MLPOutNorm
	case arch.QNorm:
		return nil, &l.Attn.QNorm
	case arch.KNorm:
		return nil, &l.Attn.KNorm
	}
	panic(fmt.Sprintf("model: tensor %s has role %d, which no weight field takes (newModel admits only families it implements)", t.Name, t.Role))
}

// mlaField returns the latent-attention weight field a tensor fills (a
// matrix or a vector), the MLA made on first use; nil for other roles.
func (l *Layer) mlaField(t arch.Tensor) (*tensor.Matrix, *[]float32) {
	if l.MLA == nil {
		l.MLA = &MLA{}
	}
	a := l.MLA
	var lin *Linear
	switch t.Role {
	case arch.QANorm:
		return nil, &a.QANorm
	case arch.KVANorm:
		return nil, &a.KVANorm
	case arch.QAProj:
		lin = &a.QA
	case arch.QBProj:
		lin = &a.QB
	case arch.QProj:
		lin = &a.Q
	case arch.KVAProj:
		lin = &a.KVA
	case arch.KVBProj:
		lin = &a.KVB
	case arch.OProj:
		lin = &a.O
	default:
		return nil, nil
	}
	lin.Out, lin.In = t.Shape[0], t.Shape[1]
	return &lin.W, nil
}

// rawField returns the byte field an MXFP4 expert tensor fills (gpt-oss's
// blocks and scales), nil for every other tensor.
func (m *Model) rawField(t arch.Tensor) *[]uint8 {
	if !m.Config.MXFP4 {
		return nil
	}
	var e *MoE
	if t.Layer >= 0 {
		l := &m.Layers[t.Layer]
		l.expertLinear(arch.Tensor{Role: arch.Router}, m.Config.Experts)
		e = l.MoE
	}
	switch t.Role {
	case arch.ExpertsGateUp:
		return &e.GateUpBlocks
	case arch.ExpertsGateUpScales:
		return &e.GateUpScales
	case arch.ExpertsDown:
		return &e.DownBlocks
	case arch.ExpertsDownScales:
		return &e.DownScales
	}
	return nil
}

// expertLinear returns the linear layer of l's mixture of experts (of n
// experts, made on first use) a router or expert tensor fills.
func (l *Layer) expertLinear(t arch.Tensor, n int) *Linear {
	if l.MoE == nil {
		l.MoE = &MoE{Experts: make([]MLP, n)}
	}
	switch t.Role {
	case arch.Router:
		return &l.MoE.Router
	case arch.SharedGate, arch.SharedUp, arch.SharedDown:
		if l.MoE.Shared == nil {
			l.MoE.Shared = &MLP{}
		}
		switch t.Role {
		case arch.SharedGate:
			return &l.MoE.Shared.Gate
		case arch.SharedUp:
			return &l.MoE.Shared.Up
		}
		return &l.MoE.Shared.Down
	case arch.ExpertGate:
		return &l.MoE.Experts[t.Expert].Gate
	case arch.ExpertUp:
		return &l.MoE.Experts[t.Expert].Up
	}
	return &l.MoE.Experts[t.Expert].Down
}

// linear returns the linear layer of l a projection role belongs to, and
// whether the role is its bias; nil for other roles.
func (l *Layer) linear(r arch.Role) (lin *Linear, bias bool) {
	switch r {
	case arch.QProj, arch.QBias:
		return &l.Attn.Q, r == arch.QBias
	case arch.KProj, arch.KBias:
		return &l.Attn.K, r == arch.KBias
	case arch.VProj, arch.VBias:
		return &l.Attn.V, r == arch.VBias
	case arch.OProj, arch.OProjBias:
		return &l.Attn.O, r == arch.OProjBias
	case arch.GateProj:
		return &l.MLP.Gate, false
	case arch.UpProj:
		return &l.MLP.Up, false
	case arch.DownProj:
		return &l.MLP.Down, false
	}
	return nil, false
}

// halfDType returns the Matrix dtype a checkpoint dtype is kept in when it
// is one of the 16-bit formats.
func halfDType(d safetensors.DType) (tensor.DType, bool) {
	switch d {
	case safetensors.BF16:
		return tensor.BF16, true
	case safetensors.F16:
		return tensor.F16, true
	}
	return tensor.F32, false
}

// FromWeights builds a model from a parsed config and a tensor store, and
// takes the store: every tensor the config implies must be present with
// exactly the implied shape. Matrices stored as bf16 or f16 (the embedding,
// the projections, lm_head) stay in that format: the model reads them in
// place from the store's memory (Raw: a memory-mapped file) when it is
// 2-byte aligned and the host little-endian, else from one aligned copy;
// everything else (float32 matrices, and norm weights and biases of any
// dtype) is converted into one float32 allocation. The model closes w when
// it reads none of w's memory, at once, else in Model.Close; and on an
// error.
func FromWeights(cfg *checkpoint.Config, w WeightSource, dev tensor.Device) (*Model, error) {
	m, err := newModel(cfg, dev)
	if err != nil {
		w.Close()
		return nil, err
	}
	m.weights = w
	binds := m.bindings()
	infos := make([]safetensors.Info, len(binds))
	for i, b := range binds {
		info, ok := w.Info(b.name)
		if !ok {
			m.Close()
			return nil, fmt.Errorf("model: checkpoint has no tensor %q (required by config.json: model_type %s, %d layers)", b.name, cfg.ModelType, cfg.NumLayers)
		}
		if !slices.Equal(info.Shape, b.shape) {
			m.Close()
			return nil, fmt.Errorf("model: tensor %q in %s has shape %s, config.json implies %s",
				b.name, info.File, safetensors.ShapeString(info.Shape), safetensors.ShapeString(b.shape))
		}
		infos[i] = info
	}
	half, mapped, err := halfMatrices(binds, infos, w)
	if err == nil {
		var n int64
		n, err = rawBytes(binds, infos, w)
		mapped += n
	}
	m.mapped = mapped
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("model: loading weights: %w", err)
	}
	err = m.fill(binds, half, func(b binding, dst []float32) error { return w.Float32Into(b.name, dst) })
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("model: loading weights: %w", err)
	}
	if mapped == 0 {
		// Every weight was copied: the files are not needed any more.
		m.weights = nil
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	}
	return m, nil
}

// rawBytes points the byte bindings (MXFP4 blocks and scales) at their
// tensors' bytes in w's mapped files and returns how many bytes they view;
// it refuses a tensor of another dtype than uint8.
func rawBytes(binds []binding, infos []safetensors.Info, w WeightSource) (int64, error) {
	var n int64
	for i, b := range binds {
		if b.raw == nil {
			continue
		}
		if infos[i].DType != safetensors.U8 {
			return n, fmt.Errorf("tensor %q in %s has dtype %s; MXFP4 blocks and scales are U8", b.name, infos[i].File, infos[i].DType)
		}
		raw, _, err := w.Raw(b.name)
		if err != nil {
			return n, err
		}
		*b.raw = raw
		n += int64(len(raw))
	}
	return n, nil
}

// halfMatrices returns the 16-bit matrices of binds (infos[i] describes
// binds[i]'s tensor) as Matrix values at the same indices (empty for the
// bindings that go to float32), and the bytes of those that view w's memory.
//
// A file's 16-bit matrices are viewed in place as one []uint16 spanning
// them all, so that a view's capacity runs on through the tensors after it
// and fuse finds q/k/v and gate/up adjacent as they lie in the file; where
// that is not possible (odd addresses, a big-endian host) they are copied,
// in binding order, into one aligned allocation, which fuse joins the same
// way.
func halfMatrices(binds []binding, infos []safetensors.Info, w WeightSource) ([]tensor.Matrix, int64, error) {
	half := make([]tensor.Matrix, len(binds))
	type span struct {
		first    string // the tensor at the lowest offset
		lo, hi   int64  // byte range in the file covering the file's 16-bit matrices
		parities int    // bit 0: a matrix at an even offset seen, bit 1: at an odd one
	}
	spans := map[string]*span{}
	var files []string
	for i, b := range binds {
		if _, ok := halfDType(infos[i].DType); !ok || b.mat == nil {
			continue
		}
		in := infos[i]
		s := spans[in.File]
		if s == nil {
			s = &span{first: in.Name, lo: in.Offset, hi: in.Offset + in.Size}
			spans[in.File] = s
			files = append(files, in.File)
		}
		if in.Offset < s.lo {
			s.first, s.lo = in.Name, in.Offset
		}
		s.hi = max(s.hi, in.Offset+in.Size)
		s.parities |= 1 << (in.Offset & 1)
	}
	if len(files) == 0 {
		return half, 0, nil
	}
	littleEndian := binary.NativeEndian.Uint16([]byte{1, 0}) == 1
	views := map[string][]uint16{}
	for _, f := range files {
		s := spans[f]
		raw, _, err := w.Raw(s.first)
		if err != nil {
			return nil, 0, err
		}
		// A view needs the host's byte order and every matrix of the file
		// at an even address (the same parity of offset as the first).
		if len(raw) == 0 || !littleEndian || s.parities != 1<<(s.lo&1) || uintptr(unsafe.Pointer(&raw[0]))%2 != 0 {
			continue
		}
		// The file is mapped whole: the bytes from its first 16-bit matrix
		// to the end of its last are one valid range, as long as w is open.
		views[f] = unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), (s.hi-s.lo)/2)
	}
	var copied []uint16 // the 16-bit matrices that cannot be viewed, in binding order
	for i, b := range binds {
		dt, ok := halfDType(infos[i].DType)
		if !ok || b.mat == nil || views[infos[i].File] != nil {
			continue
		}
		if copied == nil {
			n := 0
			for j, c := range binds {
				if _, ok := halfDType(infos[j].DType); ok && c.mat != nil && views[infos[j].File] == nil {
					n += product(c.shape)
				}
			}
			copied = make([]uint16, 0, n)
		}
		raw, _, err := w.Raw(b.name)
		if err != nil {
			return nil, 0, err
		}
		off := len(copied)
		for k := 0; k+1 < len(raw); k += 2 {
			copied = append(copied, binary.LittleEndian.Uint16(raw[k:]))
		}
		// Slicing with the allocation's capacity keeps later copies
		// reachable from this one, for fuse.
		half[i] = tensor.HalfMatrix(dt, copied[off:len(copied)], matRows(b.shape), b.shape[len(b.shape)-1])
	}
	var mapped int64
	for i, b := range binds {
		dt, ok := halfDType(infos[i].DType)
		v := views[infos[i].File]
		if !ok || b.mat == nil || v == nil {
			continue
		}
		mapped += infos[i].Size
		lo := (infos[i].Offset - spans[infos[i].File].lo) / 2
		half[i] = tensor.HalfMatrix(dt, v[lo:lo+infos[i].Size/2], matRows(b.shape), b.shape[len(b.shape)-1])
	}
	return half, mapped, nil
}

// fill lays the float32 weights of binds (those whose half entry is empty;
// half may be nil) out back to back in one float32 allocation, in order (so
// that fuse finds q/k/v and gate/up adjacent), fills each with set, binds
// the 16-bit matrices of half, ties the output layer to the embedding when
// the config says so, and fuses.
func (m *Model) fill(binds []binding, half []tensor.Matrix, set func(b binding, dst []float32) error) error {
	is16 := func(i int) bool { return half != nil && !half[i].Empty() }
	total := 0
	for i, b := range binds {
		if !is16(i) && b.raw == nil {
			total += product(b.shape)
		}
	}
	arena := make([]float32, total)
	off := 0
	for i, b := range binds {
		if b.raw != nil {
			continue // rawBytes pointed it at the file's bytes
		}
		if is16(i) {
			*b.mat = half[i]
			continue
		}
		n := product(b.shape)
		dst := arena[off : off+n]
		off += n
		if err := set(b, dst); err != nil {
			return err
		}
		if b.mat != nil {
			*b.mat = tensor.F32Matrix(dst, matRows(b.shape), b.shape[len(b.shape)-1])
		} else {
			*b.vec = dst
		}
	}
	if m.Config.TieWordEmbeddings {
		m.LMHead = m.Embed
	}
	m.split()
	for i := range m.Layers {
		if e := m.Layers[i].MoE; e != nil && (!e.GateUp.Empty() || e.GateUpBlocks != nil) {
			if err := m.unstack(e); err != nil {
				return err
			}
		}
	}
	if m.Config.RopeInterleave {
		for i := range m.Layers {
			if a := m.Layers[i].MLA; a != nil {
				m.deinterleave(a)
			}
		}
	}
	return m.fuse()
}

// split points the q, k and v (and gate and up) layers at their rows of a
// checkpoint's fused matrix (Phi-3's qkv_proj and gate_up_proj), which
// fuse then finds adjacent and multiplies as one again.
func (m *Model) split() {
	part := func(lin *Linear, w tensor.Matrix, lo, hi int) {
		lin.W, lin.In, lin.Out = w.RowRange(lo, hi), w.Cols, hi-lo
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		if w := l.Attn.QKV; !w.Empty() {
			part(&l.Attn.Q, w, 0, m.qDim)
			part(&l.Attn.K, w, m.qDim, m.qDim+m.kvDim)
			part(&l.Attn.V, w, m.qDim+m.kvDim, m.qDim+2*m.kvDim)
		}
		if w := l.MLP.GateUp; !w.Empty() {
			part(&l.MLP.Gate, w, 0, m.inter)
			part(&l.MLP.Up, w, m.inter, 2*m.inter)
		}
	}
}

// fuse sets each layer's fused q/k/v and gate/up matrices when the weights lie
// back to back in memory, in one dtype (as fill lays out float32 weights,
// and as a checkpoint file or halfMatrices' copy holds 16-bit ones), so that
// decode runs one matrix-vector product where it would run three or two.
// Fusing copies nothing: the fused matrix views the parts' values. It then
// puts the weights on the device (prepare).
func (m *Model) fuse() error {
	for i := range m.Layers {
		l := &m.Layers[i]
		if l.MLA == nil {
			l.Attn.nn.QKV = tensor.WeightOf(adjacent(l.Attn.Q.W, l.Attn.K.W, l.Attn.V.W))
		}
		if l.MoE == nil {
			l.MLP.fuse()
			continue
		}
		for e := range l.MoE.Experts {
			l.MoE.Experts[e].fuse()
		}
		if l.MoE.Shared != nil {
			l.MoE.Shared.fuse()
		}
	}
	return m.prepare()
}

// fuse sets the MLP's fused gate/up matrix where its weights lie back to
// back and carry no bias.
func (f *MLP) fuse() {
	if f.Gate.B == nil && f.Up.B == nil {
		f.nn.GateUp = tensor.WeightOf(adjacent(f.Gate.W, f.Up.W))
	}
}

// adjacent returns parts as one matrix of their rows when each part's
// values follow the previous part's in the same allocation (or mapping), in
// one dtype and width; else the empty Matrix.
func adjacent(parts ...tensor.Matrix) tensor.Matrix {
	whole := parts[0]
	for _, p := range parts[1:] {
		if p.DType != whole.DType || p.Cols != whole.Cols {
			return tensor.Matrix{}
		}
		switch whole.DType {
		case tensor.F32:
			w := whole.F32
			if cap(w) < len(w)+len(p.F32) || &w[:len(w)+1][len(w)] != &p.F32[0] {
				return tensor.Matrix{}
			}
			whole.F32 = w[:len(w)+len(p.F32)]
		default:
			w := whole.U16
			if cap(w) < len(w)+len(p.U16) || &w[:len(w)+1][len(w)] != &p.U16[0] {
				return tensor.Matrix{}
			}
			whole.U16 = w[:len(w)+len(p.U16)]
		}
		whole.Rows += p.Rows
	}
	return whole
}

// prepare puts the weights on the device: every matrix the forward pass
// multiplies by goes to the device's PrepareWeights at once, which chooses
// their layouts from the whole set (a fused matrix stands for its parts,
// which the pass then never multiplies by alone); norms and biases are
// uploaded.
func (m *Model) prepare() error {
	up := func(v []float32) (tensor.Tensor, error) {
		if v == nil {
			return tensor.Tensor{}, nil
		}
		return m.dev.Upload(tensor.F32Matrix(v, 1, len(v)))
	}
	// Norm weights go to the device with the family's offset added, in
	// float32 as Gemma's RMSNorm adds it: (1+w) once instead of per row.
	norm := func(v []float32) (tensor.Tensor, error) {
		if v == nil || m.fam.NormOffset == 0 {
			return up(v)
		}
		o := make([]float32, len(v))
		for i, w := range v {
			o[i] = m.fam.NormOffset + w
		}
		return up(o)
	}
	var err error
	m.lm = tensor.WeightOf(m.LMHead)
	m.embed = tensor.WeightOf(m.Embed)
	if m.norm, err = norm(m.Norm); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	ws := []*tensor.Weight{&m.lm}
	var ls []*nn.Linear
	for i := range m.Layers {
		l := &m.Layers[i]
		if l.MLA != nil {
			if ls, err = m.prepareMLA(l.MLA, norm, ls); err != nil {
				return err
			}
		} else {
			for _, lin := range []*Linear{&l.Attn.Q, &l.Attn.K, &l.Attn.V, &l.Attn.O} {
				if lin.nn, err = nn.NewFrozen(m.dev, lin.W, lin.B); err != nil {
					return fmt.Errorf("model: %w", err)
				}
			}
		}
		for _, n := range []struct {
			dst *tensor.Tensor
			v   []float32
		}{{&l.attnNorm, l.AttnNorm}, {&l.mlpNorm, l.MLPNorm}, {&l.attnOutNorm, l.AttnOutNorm}, {&l.mlpOutNorm, l.MLPOutNorm},
			{&l.Attn.nn.QNorm, l.Attn.QNorm}, {&l.Attn.nn.KNorm, l.Attn.KNorm}} {
			if *n.dst, err = norm(n.v); err != nil {
				return fmt.Errorf("model: %w", err)
			}
		}
		if l.MLA != nil {
			l.Attn.at = cacheAttention{m: m, l: i}
			if ws, ls, err = m.prepareFFN(l, ws, ls); err != nil {
				return err
			}
			continue
		}
		// The layers whose own products run: a fused matrix replaces its
		// parts' (which keep only their biases).
		ls = append(ls, l.Attn.O.nn)
		a := &l.Attn.nn
		a.Q, a.K, a.V, a.O = l.Attn.Q.nn, l.Attn.K.nn, l.Attn.V.nn, l.Attn.O.nn
		a.Eps, a.Rot = m.eps, m.rot
		if l.window > 0 {
			a.Rot = m.rotLocal
		}
		a.Shape = tensor.AttnShape{Heads: m.nHeads, KVHeads: m.nKV, HeadDim: m.hd, Softcap: m.attnSoftcap, Window: l.window}
		if a.Shape.Sinks, err = up(l.Attn.Sinks); err != nil {
			return fmt.Errorf("model: %w", err)
		}
		l.Attn.at = cacheAttention{m: m, l: i}
		if !a.QKV.Empty() {
			ws = append(ws, &a.QKV)
		} else {
			ls = append(ls, l.Attn.Q.nn, l.Attn.K.nn, l.Attn.V.nn)
		}
		if ws, ls, err = m.prepareFFN(l, ws, ls); err != nil {
			return err
		}
	}
	nn.Freeze(m.dev, ws, ls...)
	return nil
}

// prepareFFN puts a layer's feed-forward block on the device: its MLP, or
// its router, experts and shared MLP.
func (m *Model) prepareFFN(l *Layer, ws []*tensor.Weight, ls []*nn.Linear) ([]*tensor.Weight, []*nn.Linear, error) {
	if l.MoE == nil {
		return m.prepareMLP(&l.MLP, ws, ls)
	}
	r := &l.MoE.Router
	var err error
	if r.nn, err = nn.NewFrozen(m.dev, r.W, r.B); err != nil {
		return ws, ls, fmt.Errorf("model: %w", err)
	}
	ls = append(ls, r.nn)
	if l.MoE.Bias != nil {
		if l.MoE.bias, err = m.dev.Upload(tensor.F32Matrix(l.MoE.Bias, 1, len(l.MoE.Bias))); err != nil {
			return ws, ls, fmt.Errorf("model: %w", err)
		}
	}
	for e := range l.MoE.Experts {
		if ws, ls, err = m.prepareMLP(&l.MoE.Experts[e], ws, ls); err != nil {
			return ws, ls, err
		}
	}
	if l.MoE.Shared != nil {
		return m.prepareMLP(l.MoE.Shared, ws, ls)
	}
	return ws, ls, nil
}

// prepareMLP puts an MLP's layers on the device (frozen) with the family's
// activation, and adds the matrices its products run by to ws (the fused
// gate/up) and ls (the rest).
func (m *Model) prepareMLP(f *MLP, ws []*tensor.Weight, ls []*nn.Linear) ([]*tensor.Weight, []*nn.Linear, error) {
	for _, lin := range []*Linear{&f.Gate, &f.Up, &f.Down} {
		var err error
		if lin.nn, err = nn.NewFrozen(m.dev, lin.W, lin.B); err != nil {
			return ws, ls, fmt.Errorf("model: %w", err)
		}
	}
	f.nn.Gate, f.nn.Up, f.nn.Down = f.Gate.nn, f.Up.nn, f.Down.nn
	switch {
	case m.fam.Activation == "gelu_pytorch_tanh":
		f.nn.Act = nn.GELUTanh
	case m.Config.SwiGLULimit > 0:
		f.nn.Act, f.nn.Alpha, f.nn.Limit = nn.ClampedSwiGLU, float32(m.Config.SwiGLUAlpha), float32(m.Config.SwiGLULimit)
	}
	ls = append(ls, f.Down.nn)
	if !f.nn.GateUp.Empty() {
		return append(ws, &f.nn.GateUp), ls, nil
	}
	return ws, append(ls, f.Gate.nn, f.Up.nn), nil
}

// matRows returns the rows of a tensor held as a matrix: every dimension
// but the last (a stacked [experts, in, out] tensor is experts·in rows).
func matRows(shape []int) int { return product(shape[:len(shape)-1]) }

func product(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
