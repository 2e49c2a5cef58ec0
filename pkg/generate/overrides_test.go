package generate

import (
	"errors"
	"strings"
	"testing"
)

// TestOverridesCheckedWhenGreedy: an out-of-range sampling override is an
// *OverrideError even at temperature 0, where greedy decoding ignores it.
func TestOverridesCheckedWhenGreedy(t *testing.T) {
	tg := loadStories(t)
	zero, two, minus := 0.0, 2.0, -5
	for _, c := range []struct {
		o    Overrides
		want string
	}{
		{Overrides{TopP: &two}, "top-p 2"},
		{Overrides{Temperature: &zero, MinP: &two}, "min-p 2"},
		{Overrides{TopK: &minus}, "top-k -5"},
	} {
		_, err := Resolve(tg, c.o)
		var oe *OverrideError
		if !errors.As(err, &oe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an OverrideError about %q", c.o, err, c.want)
		}
	}
	one := 1.0
	if _, err := Resolve(tg, Overrides{Temperature: &zero, TopP: &one}); err != nil {
		t.Errorf("a valid override refused: %v", err)
	}
}
