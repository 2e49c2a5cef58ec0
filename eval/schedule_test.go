package eval

import (
	"context"
	"errors"
	"testing"

	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/sample"
)

// MeasureRoundCost returns one cost per verified length, each above one
// decode step (a round drafts as well), never falling with the length,
// each finite.
func TestMeasureRoundCost(t *testing.T) {
	m := loadTarget(t)
	ps := testPrompts(t, evalPrompts, 1)
	d := randomEagle(t, m, 1, 1)
	cfg, err := Config{Mode: ModeChain, Depth: 6}.withDefaults(d)
	if err != nil {
		t.Fatal(err)
	}
	c, err := MeasureRoundCost(m, d, cfg, ps[0].Tokens, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("round cost per verified length: %v", c)
	if len(c) != 7 || !(c[0] > 1) {
		t.Fatalf("costs %v: want 7, the first above 1", c)
	}
	for i := 1; i < len(c); i++ {
		if !(c[i] >= c[i-1]) || c[i] > 1e4 {
			t.Fatalf("costs %v: not a finite non-decreasing list", c)
		}
	}
	if _, err := MeasureRoundCost(m, d, cfg, nil, 3); err == nil {
		t.Fatal("no prompt: no error")
	}
}

// Medusa and EAGLE-3 drafts have no confidence head: eval refuses a
// schedule for them naming the setting, before anything runs.
func TestScheduleRefusedWithoutConfidence(t *testing.T) {
	m := loadTarget(t)
	ps := testPrompts(t, evalPrompts, 1)
	for name, d := range map[string]*Drafter{"medusa": randomMedusa(t, m, 2, 1), "eagle3": randomEagle(t, m, 1, 1)} {
		for _, sc := range []drafters.Schedule{{Kind: drafters.ScheduleThreshold, Threshold: 0.5}, {Kind: drafters.ScheduleSPS}} {
			cfg := Config{Mode: ModeChain, MaxNewTokens: 4, Sampling: sample.Params{}, Schedule: sc}
			_, err := Run(context.Background(), m, d, ps, cfg)
			var se *drafters.SettingError
			if !errors.As(err, &se) || se.Settings[0] != drafters.SettingSchedule {
				t.Errorf("%s with the %s schedule: %v, want a SettingError naming the schedule", name, sc.Kind, err)
			}
		}
	}
}

// With no shape given each drafter drafts its default one: Medusa and
// EAGLE-3 a tree (DFlash and DSpark a chain: their Configure tests).
func TestDefaultShape(t *testing.T) {
	m := loadTarget(t)
	for name, d := range map[string]*Drafter{"medusa": randomMedusa(t, m, 2, 1), "eagle3": randomEagle(t, m, 1, 1)} {
		cfg, err := Config{}.withDefaults(d)
		if err != nil || cfg.Mode != ModeTree {
			t.Errorf("%s: default shape %q, %v; want a tree", name, cfg.Mode, err)
		}
	}
}
