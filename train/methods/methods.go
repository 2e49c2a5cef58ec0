// Package methods lists the methods drafter train offers through the
// generic command (loop.Command): `drafter train KIND` with the flags each
// declares. Adding a method is one line in Commands. Medusa and EAGLE-3
// keep their own command-line code in cmd/drafter (two spellings of their
// flags that scripts depend on).
package methods

import (
	"github.com/drafter-ai/drafter/train/dflash"
	"github.com/drafter-ai/drafter/train/dspark"
	"github.com/drafter-ai/drafter/train/loop"
)

// Commands returns the generic commands, in the order drafter train lists
// them. The list is built on each call: there is no registry to mutate.
func Commands() []loop.Command {
	return []loop.Command{
		dflash.Command{},
		dspark.Command{},
	}
}
