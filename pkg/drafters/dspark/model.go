// Package dspark is the DSpark drafter method (DeepSeek, arXiv 2607.05147;
// deepseek-ai/DeepSpec): DFlash's block-parallel backbone
// (pkg/drafters/dflash: fused target features injected as keys and values
// into every draft layer, a block [anchor, mask, ...] drafted in one
// forward) with shifted labels (every one of the B slots drafts: slot k at
// position p+k predicts x_{p+k+1}), a low-rank Markov head that makes the
// block semi-autoregressive at the cost of one rank-r product per token,
// and a confidence head predicting each slot's conditional acceptance. See
// ../shared/docs/methods.md section 4.
//
// The package holds the heads (forward and backward side by side), the
// draft held for inference with its drafting session, the proposer, and the
// export layouts (DeepSpec native Qwen3DSparkModel, speculators "dspark")
// with their writer, detector and loader. The trainer is train/dspark.
package dspark

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
)

// Kind names the method.
const Kind drafters.Kind = "dspark"

// HeadShape is the shape of DSpark's heads on top of the backbone.
type HeadShape struct {
	// Rank is the Markov head's rank r (markov_rank); 0 means no Markov
	// head (DeepSpec's shifted "DFlash" baseline).
	Rank int
	// Confidence enables the confidence head (enable_confidence_head);
	// WithMarkov feeds it [o_k ; W1[prev_k]] (confidence_head_with_markov,
	// which needs a Markov head).
	Confidence, WithMarkov bool
}

// Validate checks the shape.
func (s HeadShape) Validate() error {
	switch {
	case s.Rank < 0:
		return fmt.Errorf("dspark: markov_rank %d must not be negative (0: no Markov head)", s.Rank)
	case s.WithMarkov && !s.Confidence:
		return fmt.Errorf("dspark: confidence_head_with_markov needs enable_confidence_head")
	case s.WithMarkov && s.Rank == 0:
		return fmt.Errorf("dspark: confidence_head_with_markov needs a Markov head (markov_rank > 0)")
	}
	return nil
}

// ConfIn is the confidence head's input width for a backbone of width hd.
func (s HeadShape) ConfIn(hd int) int {
	if s.WithMarkov {
		return hd + s.Rank
	}
	return hd
}

// Heads are the heads' parameters (host float32 views into All): the
// Markov head's W1 [V, r] and W2 [V, r], and the confidence head's
// projection ConfW [1, ConfIn] and bias ConfB [1] (empty where the shape
// has no such head).
type Heads struct {
	Shape            HeadShape
	W1, W2           []float32
	ConfW, ConfB     []float32
	All              []float32
	vocab, hd, total int
}

// HeadSpec names one head tensor: its key in DeepSpec's layout and shape.
type HeadSpec struct {
	Name  string
	Shape []int
}

// HeadSpecs lists the head tensors of shape s for vocabulary v and
// backbone width hd, in their fixed order (that of Heads.All).
func HeadSpecs(s HeadShape, v, hd int) []HeadSpec {
	var ss []HeadSpec
	if s.Rank > 0 {
		ss = append(ss, HeadSpec{"markov_head.markov_w1.weight", []int{v, s.Rank}}, HeadSpec{"markov_head.markov_w2.weight", []int{v, s.Rank}})
	}
	if s.Confidence {
		ss = append(ss, HeadSpec{"confidence_head.proj.weight", []int{1, s.ConfIn(hd)}}, HeadSpec{"confidence_head.proj.bias", []int{1}})
	}
	return ss
}

// NewHeads carves the heads of shape s out of all (nil: zeroed).
func NewHeads(s HeadShape, v, hd int, all []float32) (*Heads, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	n := 0
	for _, sp := range HeadSpecs(s, v, hd) {
		n += numel(sp.Shape)
	}
	if all == nil {
		all = make([]float32, n)
	}
	if len(all) != n {
		return nil, fmt.Errorf("dspark: %d head values for a shape of %d", len(all), n)
	}
	h := &Heads{Shape: s, All: all, vocab: v, hd: hd, total: n}
	off := 0
	take := func(k int) []float32 {
		v := all[off : off+k : off+k]
		off += k
		return v
	}
	if s.Rank > 0 {
		h.W1, h.W2 = take(v*s.Rank), take(v*s.Rank)
	}
	if s.Confidence {
		h.ConfW, h.ConfB = take(s.ConfIn(hd)), take(1)
	}
	return h, nil
}

// Tensors lists the heads' tensors in HeadSpecs' order.
func (h *Heads) Tensors() []dflash.Tensor[float32] {
	var out []dflash.Tensor[float32]
	off := 0
	for _, sp := range HeadSpecs(h.Shape, h.vocab, h.hd) {
		k := numel(sp.Shape)
		out = append(out, dflash.Tensor[float32]{Name: sp.Name, Shape: sp.Shape, Data: h.All[off : off+k]})
		off += k
	}
	return out
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Draft is a DSpark draft held for inference: the backbone (whose
// Geometry.BlockSize is B: every slot drafts), the heads, the draft's own
// copies of the target's embedding and lm_head ([V, Hd] each, frozen in
// training and shipped in the export), and the Hugging Face hidden_states
// indices of the fused target layers.
type Draft struct {
	Geometry dflash.Geometry
	Params   *dflash.Params
	Heads    *Heads
	Embed    []float32
	LMHead   []float32
	// LayerIDs are HF hidden_states indices, in fc's input order.
	LayerIDs []int
	// TargetLayers is the target's num_hidden_layers; NumAnchors the
	// training anchors per sequence (recorded in the config).
	TargetLayers, NumAnchors int
}

// Validate checks the parts against each other.
func (d *Draft) Validate() error {
	g := d.Geometry
	if err := g.Validate(); err != nil {
		return err
	}
	if g.Causal {
		return fmt.Errorf("dspark: a causal block is not DSpark's (DeepSpec attends bidirectionally within the block)")
	}
	if d.Params == nil || len(d.Params.All) != dflash.NumParams(g) {
		return fmt.Errorf("dspark: backbone parameters do not match the geometry")
	}
	if d.Heads == nil || d.Heads.vocab != g.Vocab || d.Heads.hd != g.Hidden {
		return fmt.Errorf("dspark: heads do not match the geometry (vocab %d, hidden %d)", g.Vocab, g.Hidden)
	}
	if len(d.Embed) != g.Vocab*g.Hidden || len(d.LMHead) != g.Vocab*g.Hidden {
		return fmt.Errorf("dspark: embedding and lm_head of %d and %d values, want vocab %d x hidden %d", len(d.Embed), len(d.LMHead), g.Vocab, g.Hidden)
	}
	if len(d.LayerIDs) != g.Features {
		return fmt.Errorf("dspark: %d feature layer ids for fc over %d features", len(d.LayerIDs), g.Features)
	}
	for i := 1; i < len(d.LayerIDs); i++ {
		if d.LayerIDs[i] <= d.LayerIDs[i-1] {
			// DeepSpec's validate_target_layer_ids refuses any other order.
			return fmt.Errorf("dspark: feature layers %v must be strictly ascending", d.LayerIDs)
		}
	}
	return nil
}
