// Package layerids converts the target-layer ids drafter's exports write
// between the spellings the engines read. Inside drafter a target layer is
// always a Hugging Face hidden_states index (k = the residual stream after
// decoder layer k-1, 0 = the embedding output); export formats spell it
// either that way or as the decoder layer whose output it is (k-1). An
// off-by-one between the two loads without an error and collapses
// acceptance, so every conversion goes through this one table.
package layerids

import "fmt"

// Spelling is one way an export format writes target-layer ids.
type Spelling int

// The spellings of methods.md's layer-id table.
const (
	// EAGLEAux is eagle_aux_hidden_state_layer_ids (vLLM and speculators,
	// EAGLE-3): Hugging Face hidden_states indices.
	EAGLEAux Spelling = iota
	// DFlashTarget is dflash_config.target_layer_ids (z-lab, SpecForge,
	// SGLang, vLLM native DFlash): the decoder layer whose output is read.
	DFlashTarget
	// SpeculatorsAux is aux_hidden_state_layer_ids of speculators' DFlash
	// and DSpark configs: Hugging Face hidden_states indices.
	SpeculatorsAux
	// DeepSpecTarget is DeepSpec's top-level target_layer_ids (DSpark): the
	// decoder layer whose output is read, -1 meaning the embedding output.
	DeepSpecTarget
)

// String names the spelling as the config key it is written under.
func (s Spelling) String() string {
	switch s {
	case EAGLEAux:
		return "eagle_aux_hidden_state_layer_ids"
	case DFlashTarget:
		return "dflash_config.target_layer_ids"
	case SpeculatorsAux:
		return "aux_hidden_state_layer_ids"
	case DeepSpecTarget:
		return "target_layer_ids"
	}
	return fmt.Sprintf("Spelling(%d)", int(s))
}

// offset is what the spelling subtracts from a Hugging Face index.
func (s Spelling) offset() (int, error) {
	switch s {
	case EAGLEAux, SpeculatorsAux:
		return 0, nil
	case DFlashTarget, DeepSpecTarget:
		return 1, nil
	}
	return 0, fmt.Errorf("layerids: unknown spelling %d", int(s))
}

// min is the smallest id the spelling allows.
func (s Spelling) min() int {
	switch s {
	case DeepSpecTarget:
		return -1
	case DFlashTarget:
		return 0
	}
	return 0
}

// Encode returns the Hugging Face indices hf as s writes them.
func Encode(s Spelling, hf []int) ([]int, error) {
	off, err := s.offset()
	if err != nil {
		return nil, err
	}
	out := make([]int, len(hf))
	for i, k := range hf {
		if k-off < s.min() {
			return nil, fmt.Errorf("layerids: hidden_states index %d cannot be written as %s (smallest %d)", k, s, s.min()+off)
		}
		out[i] = k - off
	}
	return out, nil
}

// Decode returns the Hugging Face indices of ids written as s, checking each
// against a target of numLayers decoder layers (indices 0 to numLayers).
func Decode(s Spelling, ids []int, numLayers int) ([]int, error) {
	off, err := s.offset()
	if err != nil {
		return nil, err
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		if id < s.min() || id+off > numLayers {
			return nil, fmt.Errorf("layerids: %s[%d] = %d is outside [%d, %d] for a target of %d layers", s, i, id, s.min(), numLayers-off, numLayers)
		}
		out[i] = id + off
	}
	return out, nil
}

// DFlashDefault returns the target layers DFlash's reference code reads by
// default for a draft of numDraftLayers layers, as output-of-layer ids
// (DFlashTarget): the middle layer for one draft layer, else numDraftLayers
// ids spread evenly from 1 to numTargetLayers-3, rounded half to even as
// Python's round does (the engines compute the same list).
func DFlashDefault(numTargetLayers, numDraftLayers int) []int {
	if numDraftLayers <= 1 {
		return []int{numTargetLayers / 2}
	}
	start, end := 1, numTargetLayers-3
	ids := make([]int, numDraftLayers)
	for i := range ids {
		ids[i] = roundHalfEven(float64(start) + float64(i*(end-start))/float64(numDraftLayers-1))
	}
	return ids
}

// roundHalfEven rounds x to the nearest integer, ties to even.
func roundHalfEven(x float64) int {
	f := int(x)
	if x < 0 && float64(f) != x {
		f--
	}
	d := x - float64(f)
	switch {
	case d > 0.5:
		return f + 1
	case d < 0.5:
		return f
	case f%2 == 0:
		return f
	}
	return f + 1
}
