package eval

import (
	"errors"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/sample"
)

// TestDraftFitsEdge: checkDraftFits's range ends exactly where the decoder's
// sequence stops fitting: the longest draft it allows with a one-token prompt
// gets its runner, one more node is a *ConfigError naming the flag. Whatever
// the drafter's shape: an EAGLE-3 chain and tree, a Medusa tree.
func TestDraftFitsEdge(t *testing.T) {
	m := loadTarget(t)
	P := m.MaxPositions()
	eagle, medusa := randomEagle(t, m, 100, 1), randomMedusa(t, m, 2, 1)
	prompt := []Prompt{{ID: "one", Tokens: []int{1}}}
	wide := func(n int) [][]int { // a Medusa tree of n nodes, 1 deep
		c := make([][]int, n)
		for i := range c {
			c[i] = []int{i}
		}
		return c
	}
	for _, c := range []struct {
		name string
		d    *Drafter
		fit  func(maxNew int) Config // the largest shape that fits
		over func(maxNew int) Config // one node more
		flag string
	}{
		{"eagle3 chain", eagle,
			func(n int) Config { return Config{Mode: ModeChain, Depth: P - n - 3} },
			func(n int) Config { return Config{Mode: ModeChain, Depth: P - n - 2} }, "--depth"},
		{"eagle3 tree", eagle,
			func(n int) Config { return Config{Mode: ModeTree, TotalTokens: P - n - 2} },
			func(n int) Config { return Config{Mode: ModeTree, TotalTokens: P - n - 1} }, "--total-tokens"},
		{"medusa tree", medusa,
			func(n int) Config { return Config{Mode: ModeTree, Tree: wide(P - n - 3)} },
			func(n int) Config { return Config{Mode: ModeTree, Tree: wide(P - n - 2)} }, "--tree"},
	} {
		maxNew := P - 40 // leaves room for drafts within every static bound
		fit, over := c.fit(maxNew), c.over(maxNew)
		fit.MaxNewTokens, over.MaxNewTokens = maxNew, maxNew
		fit.Sampling, over.Sampling = sample.Params{}, sample.Params{}
		if err := checkDraftFits(fit, fit, c.d, P); err != nil {
			t.Errorf("%s: the largest draft that fits: %v", c.name, err)
		}
		cfg, err := fit.withDefaults(c.d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := newRunner(m, c.d, cfg, prompt); err != nil {
			t.Errorf("%s: checkDraftFits allows a draft the decoder refuses: %v", c.name, err)
		}
		err = checkDraftFits(over, over, c.d, P)
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s: one node more: %v; want a ConfigError naming %s", c.name, err, c.flag)
		}
		cfg, _ = over.withDefaults(c.d)
		if _, err := newRunner(m, c.d, cfg, prompt); err == nil {
			t.Errorf("%s: the decoder takes a draft checkDraftFits refuses: the two disagree on the capacity", c.name)
		}
	}
}
