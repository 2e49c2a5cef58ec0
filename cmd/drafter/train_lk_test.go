package main

import (
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/medusa"
)

// TestTrainLossFlags: --loss and --lk-eta reach both trainers in their
// canonical spelling in every spelling of drafter train (so that the same
// loss records the same settings), the default stays the cross-entropy, and
// a bad loss, or η without lk_hybrid, is a usage error.
func TestTrainLossFlags(t *testing.T) {
	for _, c := range []struct {
		flags     []string
		loss      string
		eta       float64
		medusaToo bool
	}{
		{nil, "", 0, true},
		{[]string{"--loss", "ce"}, "ce", 0, true},
		{[]string{"--loss", "lk_hybrid"}, "lk_hybrid", 3, true},
		{[]string{"--loss", "lk_hybrid", "--lk-eta", "2"}, "lk_hybrid", 2, true},
		{[]string{"--loss", "nla"}, "nla", 0, true},
		{[]string{"--loss", `{"tv": 0.9, "ce": 0.1}`}, `{"kl":0.1,"tv":0.9}`, 0, true},
		{[]string{"--loss", `{"tv":1}`}, "tv", 0, true},
	} {
		for _, args := range [][]string{byEAGLE3, eagle3Args, byMedusa, medusaArgs} {
			o := trainOpts(t, with(args, c.flags...)...).Run
			var loss string
			var eta float64
			switch m := o.Method.(type) {
			case eagle3.Options:
				loss, eta = m.Config.Loss, m.Config.LKEta
			case medusa.Options:
				loss, eta = m.Config.Loss, m.Config.LKEta
			}
			if loss != c.loss || eta != c.eta {
				t.Errorf("%v: loss %q η %g, want %q %g", with(args, c.flags...), loss, eta, c.loss, c.eta)
			}
		}
	}
	for _, c := range []struct {
		flags []string
		msg   string
	}{
		{[]string{"--loss", "mse"}, `--loss "mse": want one of ce, kl, tv, nla, lk_hybrid`},
		{[]string{"--loss", "tv", "--lk-eta", "2"}, "--lk-eta 2: only lk_hybrid weighs λ by η, and loss tv does not use it"},
		{[]string{"--lk-eta", "2"}, "--lk-eta 2: only lk_hybrid weighs λ by η, and loss ce does not use it"},
		{[]string{"--loss", `{"tv":-1}`}, "want a finite weight of 0 or more"},
		{[]string{"--loss", "lk_hybrid", "--lk-eta", "-1"}, "--lk-eta -1: want a finite value of 0 or more"},
	} {
		for _, args := range [][]string{eagle3Args, byMedusa} {
			r := runCLI(t, func(any) error { return nil }, with(args, c.flags...)...)
			if r.code != exitUsage || !strings.Contains(r.msg, c.msg) {
				t.Errorf("%v: exit %d %q, want a usage error containing %q", with(args, c.flags...), r.code, r.msg, c.msg)
			}
		}
	}
}
