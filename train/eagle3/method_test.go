package eagle3

import (
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/train/loop"
)

// TestDataTargetTemperature checks EAGLE-3's target temperature chosen from
// how the captures were made: greedy distillation, sampled, teacher-forced,
// unrecorded, and a mix of greedy and sampled data, which must be settled
// by the caller.
func TestDataTargetTemperature(t *testing.T) {
	dd := func(dir string, gen any) loop.Capture {
		return loop.Capture{Dir: dir, Manifest: &capture.Manifest{Generation: gen}}
	}
	greedy := map[string]any{"temperature": 0.0, "decoding": "greedy"}
	for _, c := range []struct {
		dirs []loop.Capture
		want float64
	}{
		{[]loop.Capture{dd("a", greedy), dd("b", greedy)}, GreedyTargetTemperature},
		{[]loop.Capture{dd("a", map[string]any{"temperature": 1.0})}, 1},
		{[]loop.Capture{dd("a", map[string]any{"temperature": 0.8, "top_k": 1.0})}, GreedyTargetTemperature},
		{[]loop.Capture{dd("a", map[string]any{"temperature": 0.8, "top_k": 40.0})}, 1},
		{[]loop.Capture{dd("a", map[string]any{"teacher_forced": true})}, 1},
		{[]loop.Capture{dd("a", nil)}, 1},
	} {
		if got, err := dataTargetTemperature(c.dirs); err != nil || got != c.want {
			t.Errorf("%v: %v, %v; want %v", c.dirs[0].Manifest.Generation, got, err, c.want)
		}
	}
	_, err := dataTargetTemperature([]loop.Capture{dd("greedy-dir", greedy), dd("sampled-dir", map[string]any{"temperature": 0.7})})
	if err == nil || !strings.Contains(err.Error(), "--target-temperature") || !strings.Contains(err.Error(), "greedy-dir") || !strings.Contains(err.Error(), "sampled-dir") {
		t.Errorf("mixed data: err = %v, want a request for --target-temperature naming both captures", err)
	}

}
