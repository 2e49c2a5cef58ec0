package main

import (
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/train/loop"
	trainmethods "github.com/drafter-ai/drafter/train/methods"
)

// TestTrainMethodFlagsFromMethods: drafter train --method has every flag of
// each loop.Legacy method's subcommand, under --method's name for those
// LegacyFlags renames, and no method flag that no method declares; the
// renamed flags themselves are not there.
func TestTrainMethodFlagsFromMethods(t *testing.T) {
	find := func(path ...string) *cobra.Command {
		c, _, err := newRootCmd(nil).Find(path)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	legacy := find("train")
	declared := map[string]bool{"method": true}
	n := 0
	for _, mc := range trainmethods.Commands() {
		l, ok := mc.(loop.Legacy)
		if !ok {
			continue
		}
		n++
		as := map[string]string{}
		for _, lf := range l.LegacyFlags() {
			as[lf.Flag] = lf.Name
		}
		find("train", string(l.Kind())).Flags().VisitAll(func(f *pflag.Flag) {
			name := f.Name
			if n, ok := as[name]; ok {
				name = n
				if n != f.Name && legacy.Flags().Lookup(f.Name) != nil {
					t.Errorf("drafter train --method has --%s, which it spells --%s", f.Name, n)
				}
			}
			declared[name] = true
			if legacy.Flags().Lookup(name) == nil {
				t.Errorf("drafter train %s --%s has no --%s under drafter train --method", l.Kind(), f.Name, name)
			}
		})
	}
	if n < 2 {
		t.Fatalf("%d methods spelt by --method, want medusa and eagle3", n)
	}
	legacy.Flags().VisitAll(func(f *pflag.Flag) {
		if !declared[f.Name] && f.Name != "help" {
			t.Errorf("drafter train --method has --%s, which no method declares", f.Name)
		}
	})
}
