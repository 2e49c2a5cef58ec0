// Package methods lists the drafter methods drafter knows. Adding a method
// is one line in All.
package methods

import (
	"fmt"
	"slices"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/pkg/drafters/dspark"
	"github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/drafters/medusa"
)

// All returns every method, in the order detection tries them. The list is
// built on each call: there is no registry to mutate.
func All() []drafters.Method {
	return []drafters.Method{
		medusa.Method{},
		eagle3.Method{},
		dflash.Method{},
		dspark.Method{},
	}
}

// DefaultLayers returns the Hugging Face hidden_states indices a capture
// holds by default for a target of config c, so that it trains every method
// with its default settings: the union of every method's Capture layers,
// ascending and each once. A method whose defaults do not fit the target
// (an index outside [1, L]) is refused here, naming it.
func DefaultLayers(c *checkpoint.Config) ([]int, error) {
	var out []int
	for _, m := range All() {
		for _, k := range m.Capture(c).Layers {
			if k < 1 || k > c.NumLayers {
				return nil, fmt.Errorf("the %s method's default feature layer %d is not a hidden_states index in [1, %d] of this %d-layer target; choose --layers", m.Kind(), k, c.NumLayers, c.NumLayers)
			}
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Serves returns the methods whose default training reads only states a
// capture holding layers (and the final-norm state when finalNorm) has.
func Serves(c *checkpoint.Config, layers []int, finalNorm bool) []drafters.Kind {
	var out []drafters.Kind
	for _, m := range All() {
		n := m.Capture(c)
		if n.FinalNorm && !finalNorm {
			continue
		}
		ok := true
		for _, k := range n.Layers {
			ok = ok && slices.Contains(layers, k)
		}
		if ok {
			out = append(out, m.Kind())
		}
	}
	return out
}
