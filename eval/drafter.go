package eval

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/methods"
	"github.com/drafter-ai/drafter/pkg/model"
)

// Drafter is a loaded drafter, ready to run against one target model.
type Drafter struct {
	// Info describes where the drafter came from.
	Info *DrafterInfo
	d    drafters.Drafter
}

// NewDrafter wraps a drafter held in memory (for example a trainer's).
func NewDrafter(d drafters.Drafter) *Drafter {
	return &Drafter{Info: &DrafterInfo{Kind: d.Kind()}, d: d}
}

// LoadDrafter loads the drafter info describes for target m, through the
// method of its kind among methods.All (see loadDrafter).
func LoadDrafter(info *DrafterInfo, m *model.Model) (*Drafter, error) {
	return loadDrafter(methods.All(), info, m)
}

// loadDrafter loads the drafter info describes for target m with the method
// of its kind among ms. The method checks the export's config against its
// weights exactly (refusing non-finite weights), the export against the
// drafter.json found for it (kind, shape, feature layers) and its geometry
// against the target's.
func loadDrafter(ms []drafters.Method, info *DrafterInfo, m *model.Model) (*Drafter, error) {
	meth := methodOf(ms, info.Kind)
	if meth == nil {
		return nil, fmt.Errorf("eval: unknown drafter kind %q in %s", info.Kind, info.Dir)
	}
	d, err := meth.Load(info.Dir, info.Layout, m, info.prov)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	return &Drafter{Info: info, d: d}, nil
}

// methodOf returns the method of kind k among ms, nil when there is none.
func methodOf(ms []drafters.Method, k drafters.Kind) drafters.Method {
	for _, m := range ms {
		if m.Kind() == k {
			return m
		}
	}
	return nil
}
