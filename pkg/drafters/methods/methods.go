// Package methods lists the drafter methods drafter knows. Adding a method
// is one line in All.
package methods

import (
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/drafters/dflash"
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
	}
}
