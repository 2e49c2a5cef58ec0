// Package eagle3 is the EAGLE-3 drafter method: the draft layer (forward and
// backward, which both the trainer in train/eagle3 and the drafting session
// run), the attention of the unrolled training ("training-time test"), the
// drafting session with its KV cache and tree, the draft vocabulary, the
// proposer that drafts during speculative decoding, and the two export
// layouts (native: EAGLE/SpecForge/SGLang, also loaded by vLLM; speculators),
// each with its writer, detector and loader.
//
// The draft layer is one Llama decoder layer with the target's geometry whose
// attention reads the 2H concatenation [input_layernorm(embedding),
// hidden_norm(h)] (embedding first), fed at the first step by fc over the fused
// three-layer target feature and afterwards by its own previous pre-norm output
// (EAGLE-3.1's switches, Norms, add norms before fc and feed the normed output
// instead); it scores a reduced draft vocabulary with its own lm_head. Forward and
// backward sit side by side in the style of llm.c, as ops of a tensor.Device;
// host parameters are carved once from a contiguous buffer (Params), a
// trainer's master weights and gradients are allocated on the device
// (Weights), and activations are allocated once on the device.
package eagle3

import (
	"errors"
	"fmt"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Geometry is the draft layer's shape, which is the target's: hidden size H,
// attention heads, key/value heads, head dimension, MLP intermediate size, RMS
// norm epsilon, RoPE base and scaling, the target vocabulary V and the draft
// vocabulary N; and its EAGLE-3.1 norm switches (Norms), all off for plain
// EAGLE-3.
type Geometry struct {
	Hidden       int
	Heads        int
	KVHeads      int
	HeadDim      int
	Intermediate int
	RMSNormEps   float64
	RopeTheta    float64
	RopeScaling  *nn.RopeScaling
	MaxPositions int
	Vocab        int
	DraftVocab   int
	Norms
}

// Features is the number of target feature layers fc fuses (low, middle,
// high): fc's input is Features*H wide, and fc_norm has one norm per feature.
const Features = 3

// Norms are the EAGLE-3.1 switches on the draft layer (the config keys the
// engines read, all false for plain EAGLE-3; see
// ../shared/docs/methods.md section 1). Every norm they add is an RMSNorm in
// float32 with the draft's rms_norm_eps, its weights initialised to one.
type Norms struct {
	// FCNorm normalises each feature chunk of fc's input on its own before
	// fc: fc([RMS_0(a); RMS_1(b); RMS_2(c)]), with weights fc_norm.i.weight
	// [H] each (config key fc_norm).
	FCNorm bool
	// NormBeforeFC normalises fc's whole 3H input with one norm, weights
	// input_norm.weight [3H] (config key norm_before_fc). It excludes FCNorm:
	// the two are different recipes, and applying both matches neither.
	NormBeforeFC bool
	// NormOutput feeds the next step the final norm's output, the state the
	// lm_head reads, instead of the pre-norm output (config key
	// norm_output); the norm is applied once, for both.
	NormOutput bool
}

// Any reports whether any switch is on: the draft is EAGLE-3.1 rather than
// plain EAGLE-3.
func (n Norms) Any() bool { return n.FCNorm || n.NormBeforeFC || n.NormOutput }

// Variant names the architecture the switches describe: VariantEAGLE31 when
// any is on, else VariantEAGLE3.
func (n Norms) Variant() string {
	if n.Any() {
		return VariantEAGLE31
	}
	return VariantEAGLE3
}

// The variants Norms.Variant names, as drafter.json records them.
const (
	VariantEAGLE3  = "eagle3"
	VariantEAGLE31 = "eagle3.1"
)

// Validate checks that the geometry describes a layer this package can build.
func (g Geometry) Validate() error {
	switch {
	case g.Hidden <= 0 || g.Heads <= 0 || g.KVHeads <= 0 || g.HeadDim <= 0 || g.Intermediate <= 0:
		return fmt.Errorf("eagle3: geometry needs positive hidden_size, heads, kv heads, head_dim and intermediate_size, got %+v", g)
	case g.Heads%g.KVHeads != 0:
		return fmt.Errorf("eagle3: %d attention heads are not a multiple of %d key/value heads", g.Heads, g.KVHeads)
	case g.HeadDim%2 != 0:
		return fmt.Errorf("eagle3: head_dim %d must be even for RoPE", g.HeadDim)
	case g.Vocab <= 0 || g.DraftVocab <= 0 || g.DraftVocab > g.Vocab:
		return fmt.Errorf("eagle3: need 0 < draft vocabulary (%d) <= target vocabulary (%d)", g.DraftVocab, g.Vocab)
	case g.RMSNormEps <= 0 || g.RopeTheta <= 0:
		return fmt.Errorf("eagle3: rms_norm_eps (%g) and rope_theta (%g) must be positive", g.RMSNormEps, g.RopeTheta)
	case g.FCNorm && g.NormBeforeFC:
		return errors.New("eagle3: fc_norm and norm_before_fc are mutually exclusive: one norm per feature layer before fc, or one over their concatenation, not both")
	}
	return nil
}

// QDim is the width of the attention's queries: heads x head_dim.
func (g Geometry) QDim() int { return g.Heads * g.HeadDim }

// KVDim is the width of its keys and values: key/value heads x head_dim.
func (g Geometry) KVDim() int { return g.KVHeads * g.HeadDim }

// Params are the draft layer's trainable tensors, each a view into one
// contiguous allocation, in Hugging Face Linear layout ([out, in]).
type Params struct {
	FC         []float32 // [H, 3H]
	HiddenNorm []float32 // [H]
	InputNorm  []float32 // [H]
	Q          []float32 // [nq*hd, 2H]
	K          []float32 // [nkv*hd, 2H]
	V          []float32 // [nkv*hd, 2H]
	O          []float32 // [H, nq*hd]
	PostNorm   []float32 // [H]
	Gate       []float32 // [I, H]
	Up         []float32 // [I, H]
	Down       []float32 // [H, I]
	Norm       []float32 // [H]
	LMHead     []float32 // [N, H]
	// FCNorm are fc_norm's per-feature weights, [H] each (Norms.FCNorm;
	// nil otherwise); FCInputNorm is norm_before_fc's [3H] weight
	// (Norms.NormBeforeFC; nil otherwise).
	FCNorm      [Features][]float32
	FCInputNorm []float32

	// All is the backing slice holding every tensor above.
	All []float32
}

// paramSpec names one tensor: its native export key and shape.
type paramSpec struct {
	name  string
	shape []int
	field func(p *Params) *[]float32
	on    func(w *Weights) *tensor.Tensor
}

// specs lists the parameters in a fixed order (the order of All and of the
// optimiser state), with their native-format keys. The EAGLE-3.1 norms come
// last, so that a plain EAGLE-3 draft's layout, initialisation and optimiser
// state are what they were before the switches existed.
func specs(g Geometry) []paramSpec {
	h, q, kv, i, n := g.Hidden, g.QDim(), g.KVDim(), g.Intermediate, g.DraftVocab
	ss := []paramSpec{
		{"fc.weight", []int{h, 3 * h}, func(p *Params) *[]float32 { return &p.FC }, func(w *Weights) *tensor.Tensor { return &w.FC }},
		{"midlayer.hidden_norm.weight", []int{h}, func(p *Params) *[]float32 { return &p.HiddenNorm }, func(w *Weights) *tensor.Tensor { return &w.HiddenNorm }},
		{"midlayer.input_layernorm.weight", []int{h}, func(p *Params) *[]float32 { return &p.InputNorm }, func(w *Weights) *tensor.Tensor { return &w.InputNorm }},
		{"midlayer.self_attn.q_proj.weight", []int{q, 2 * h}, func(p *Params) *[]float32 { return &p.Q }, func(w *Weights) *tensor.Tensor { return &w.Q }},
		{"midlayer.self_attn.k_proj.weight", []int{kv, 2 * h}, func(p *Params) *[]float32 { return &p.K }, func(w *Weights) *tensor.Tensor { return &w.K }},
		{"midlayer.self_attn.v_proj.weight", []int{kv, 2 * h}, func(p *Params) *[]float32 { return &p.V }, func(w *Weights) *tensor.Tensor { return &w.V }},
		{"midlayer.self_attn.o_proj.weight", []int{h, q}, func(p *Params) *[]float32 { return &p.O }, func(w *Weights) *tensor.Tensor { return &w.O }},
		{"midlayer.post_attention_layernorm.weight", []int{h}, func(p *Params) *[]float32 { return &p.PostNorm }, func(w *Weights) *tensor.Tensor { return &w.PostNorm }},
		{"midlayer.mlp.gate_proj.weight", []int{i, h}, func(p *Params) *[]float32 { return &p.Gate }, func(w *Weights) *tensor.Tensor { return &w.Gate }},
		{"midlayer.mlp.up_proj.weight", []int{i, h}, func(p *Params) *[]float32 { return &p.Up }, func(w *Weights) *tensor.Tensor { return &w.Up }},
		{"midlayer.mlp.down_proj.weight", []int{h, i}, func(p *Params) *[]float32 { return &p.Down }, func(w *Weights) *tensor.Tensor { return &w.Down }},
		{"norm.weight", []int{h}, func(p *Params) *[]float32 { return &p.Norm }, func(w *Weights) *tensor.Tensor { return &w.Norm }},
		{"lm_head.weight", []int{n, h}, func(p *Params) *[]float32 { return &p.LMHead }, func(w *Weights) *tensor.Tensor { return &w.LMHead }},
	}
	if g.FCNorm {
		for c := range Features {
			ss = append(ss, paramSpec{FCNormKey(c), []int{h}, func(p *Params) *[]float32 { return &p.FCNorm[c] }, func(w *Weights) *tensor.Tensor { return &w.FCNorm[c] }})
		}
	}
	if g.NormBeforeFC {
		ss = append(ss, paramSpec{FCInputNormKey, []int{Features * h}, func(p *Params) *[]float32 { return &p.FCInputNorm }, func(w *Weights) *tensor.Tensor { return &w.FCInputNorm }})
	}
	return ss
}

// FCNormKey is the export key of fc_norm's weight of feature c, the same in
// both layouts: vLLM, SGLang and TensorRT-LLM each load "fc_norm.<c>.weight"
// into their model's fc_norm ModuleList.
func FCNormKey(c int) string { return fmt.Sprintf("fc_norm.%d.weight", c) }

// FCInputNormKey is the export key of norm_before_fc's weight, the same in
// both layouts (vLLM's and TensorRT-LLM's input_norm module).
const FCInputNormKey = "input_norm.weight"

// Weights are a Params' tensors on a device ([1, n] for the norms'
// vectors): a layer's weights, or its gradients. Uploaded (Params.On), they
// view the Params' values where the device's memory is the host's; a
// trainer's (NewWeights) are the device's own memory, which Write fills from
// a Params and Read copies back.
type Weights struct {
	FC, HiddenNorm, InputNorm, Q, K, V, O, PostNorm, Gate, Up, Down, Norm, LMHead tensor.Tensor
	// The EAGLE-3.1 norms' weights (empty when their switch is off).
	FCNorm      [Features]tensor.Tensor
	FCInputNorm tensor.Tensor
}

// shape2 returns a spec's shape as [rows, cols] ([1, n] for a vector).
func (s paramSpec) shape2() (rows, cols int) {
	if len(s.shape) == 2 {
		return s.shape[0], s.shape[1]
	}
	return 1, s.shape[0]
}

// On returns p's tensors of geometry g on dev.
func (p *Params) On(dev tensor.Device, g Geometry) (*Weights, error) {
	w := &Weights{}
	for _, s := range specs(g) {
		rows, cols := s.shape2()
		v := *s.field(p)
		if len(v) != rows*cols {
			return nil, fmt.Errorf("eagle3: %s has %d values, want %v", s.name, len(v), s.shape)
		}
		t, err := dev.Upload(tensor.F32Matrix(v, rows, cols))
		if err != nil {
			return nil, fmt.Errorf("eagle3: %s: %w", s.name, err)
		}
		*s.on(w) = t
	}
	return w, nil
}

// NewWeights allocates zeroed tensors of geometry g in dev's memory: a
// trainer's master weights (filled by Write) or gradients.
func NewWeights(dev tensor.Device, g Geometry) (*Weights, error) {
	w := &Weights{}
	al := tensor.Allocator{Dev: dev}
	for _, s := range specs(g) {
		*s.on(w) = al.F32(s.shape2())
	}
	return w, wrapAlloc(al.Err)
}

// Write copies p's values (of geometry g) into w's tensors on dev.
func (w *Weights) Write(dev tensor.Device, p *Params, g Geometry) {
	for _, s := range specs(g) {
		dev.Write(*s.on(w), *s.field(p))
	}
}

// Read copies w's tensors on dev into p's values (of geometry g).
func (w *Weights) Read(dev tensor.Device, p *Params, g Geometry) {
	for _, s := range specs(g) {
		dev.Read(*s.field(p), *s.on(w))
	}
}

// NamedTensor is one of a Weights' tensors under its native export key.
type NamedTensor struct {
	Name   string
	Tensor tensor.Tensor
}

// Named lists w's tensors for geometry g in the order of Params.Tensors,
// under their native-layout keys.
func (w *Weights) Named(g Geometry) []NamedTensor {
	ss := specs(g)
	ts := make([]NamedTensor, len(ss))
	for i, s := range ss {
		ts[i] = NamedTensor{Name: s.name, Tensor: *s.on(w)}
	}
	return ts
}

// Tensor is one parameter tensor: its native export key, its shape and its
// values (a view into Params.All).
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// Tensors lists p's tensors for geometry g in a fixed order (the order of
// All, and of a trainer's optimiser state) under their native-layout keys.
func (p *Params) Tensors(g Geometry) []Tensor {
	ss := specs(g)
	ts := make([]Tensor, len(ss))
	for i, s := range ss {
		ts[i] = Tensor{Name: s.name, Shape: s.shape, Data: *s.field(p)}
	}
	return ts
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// NewParams allocates one zeroed buffer for every tensor of geometry g and
// carves the views.
func NewParams(g Geometry) *Params {
	ss := specs(g)
	total := 0
	for _, s := range ss {
		total += numel(s.shape)
	}
	p := &Params{All: make([]float32, total)}
	off := 0
	for _, s := range ss {
		n := numel(s.shape)
		*s.field(p) = p.All[off : off+n : off+n]
		off += n
	}
	return p
}

// TargetGeometry is the draft layer's geometry for a target of config c
// (the target's decoder-layer shape, vocabulary and RoPE) with a draft
// vocabulary of draftVocab ids, plain EAGLE-3 (no Norms).
func TargetGeometry(c *checkpoint.Config, draftVocab int) Geometry {
	g := Geometry{Hidden: c.HiddenSize, Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
		Intermediate: c.IntermediateSize, RMSNormEps: c.RMSNormEps, RopeTheta: c.RopeTheta,
		MaxPositions: c.MaxPositions, Vocab: c.VocabSize, DraftVocab: draftVocab}
	// A longrope (Phi-3) or yarn (DeepSeek) target keeps plain RoPE in its
	// draft: their factors belong to the target's rotary part (not the
	// draft's whole head), and longrope's switch by pass, which a Llama
	// draft layer in an engine does not do; the export then has no
	// rope_scaling, so that every engine rotates the draft as training did.
	if s := c.RopeScaling; s != nil && (s.Type == "linear" || s.Type == "llama3") {
		g.RopeScaling = &nn.RopeScaling{Type: s.Type, Factor: s.Factor, LowFreqFactor: s.LowFreqFactor,
			HighFreqFactor: s.HighFreqFactor, OriginalMaxPositions: s.OriginalMaxPositions}
	}
	return g
}
