package eagle3

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
)

// LayerError is a set of EAGLE-3 feature layers the target cannot use: an
// index outside [1, L], or not 3 of them. FromOverride tells whether the
// layers were the caller's (the --layers flag) rather than the target's
// defaults.
type LayerError struct {
	FromOverride bool
	Err          error
}

// Error describes the failure.
func (e *LayerError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *LayerError) Unwrap() error { return e.Err }

// FlagMistake (loop.FlagMistake) reports whether --layers chose the
// layers: then the error is a command-line mistake.
func (e *LayerError) FlagMistake() bool { return e.FromOverride }

// featureLayers returns the three Hugging Face hidden_states indices EAGLE-3
// fuses: override when given (it must hold 3), else drafter's defaults for
// the target c (deagle3.DefaultLayers: 2, L/2, L-3 from 7 layers
// up). It reports whether they are the engines' defaults (2, L/2, L-3),
// which an export may leave unwritten, and refuses indices outside [1, L]
// (0 is the embedding output, L the last layer's output) with a *LayerError.
//
// It takes the override's order as given: the engines' own defaults repeat a
// layer below 7 layers (2, 2, 2 for 5), and a caller may train on them.
// drafter train refuses --layers that are not ascending and distinct, since
// the serving engines gather the states in ascending order, each once.
func featureLayers(c *checkpoint.Config, override []int) (layers [3]int, isDefault bool, err error) {
	L := c.NumLayers
	def := [3]int(deagle3.EngineDefaultLayers(L))
	if override == nil {
		layers = deagle3.DefaultLayers(L)
		isDefault = layers == def
	} else {
		if len(override) != 3 {
			return layers, false, &LayerError{true, fmt.Errorf("train: --layers for eagle3 takes 3 Hugging Face hidden_states indices (low,mid,high), got %d: %v", len(override), override)}
		}
		copy(layers[:], override)
		isDefault = layers == def
	}
	for i, k := range layers {
		if k < 1 || k > L {
			src := "the target's default feature layers"
			if override != nil {
				src = "--layers"
			}
			return layers, false, &LayerError{override != nil, fmt.Errorf("train: EAGLE-3 %s feature layer is hidden_states index %d from %s, outside [1, %d] for this %d-layer target (0 is the embedding output)%s",
				FeatureName(i), k, src, L, L, smallModelHint(L, override))}
		}
	}
	return layers, isDefault, nil
}

func smallModelHint(L int, override []int) string {
	if override == nil {
		return fmt.Sprintf("; pass --layers with 3 indices in [1, %d]", L)
	}
	return ""
}

// FeatureName names feature c (0, 1, 2) of the EAGLE-3 fusion.
func FeatureName(c int) string {
	switch c {
	case 0:
		return "low"
	case 1:
		return "middle"
	}
	return "high"
}
