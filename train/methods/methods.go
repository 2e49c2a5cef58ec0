// Package methods lists the methods drafter train offers through the
// generic command (loop.Command): `drafter train KIND` with the flags each
// declares. Adding a method is one line in Commands. Medusa and EAGLE-3
// are also trained by drafter train --method KIND, the spelling kept for
// scripts (loop.Legacy).
package methods

import (
	"github.com/drafter-ai/drafter/train/dflash"
	"github.com/drafter-ai/drafter/train/dspark"
	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/loop"
	"github.com/drafter-ai/drafter/train/medusa"
)

// Commands returns the generic commands, in the order drafter train lists
// them. The list is built on each call: there is no registry to mutate.
func Commands() []loop.Command {
	return []loop.Command{
		medusa.Command{},
		eagle3.Command{},
		dflash.Command{},
		dspark.Command{},
	}
}
