package loop

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Reporter draws the progress bar (step/total, loss, tokens/s, ETA) on w and
// prints lines above it: one per held-out evaluation, and the caller's. A
// nil w reports nothing.
type Reporter struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	start time.Time
	first int // step at the first report (non-zero after a resume)
	now   func() time.Time
}

// NewReporter reports on w (nil: nothing).
func NewReporter(w io.Writer) *Reporter {
	return &Reporter{w: w, now: time.Now}
}

// step records an optimiser step. total is the scheduled cap (early stopping
// may end sooner); tps the trainer's tokens per second.
func (r *Reporter) step(step, total, epoch int, loss, tps float64) {
	if r.w == nil {
		return
	}
	if r.bar == nil {
		r.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(r.w),
			progressbar.OptionSetWidth(24),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionSetElapsedTime(false),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionSetRenderBlankState(false),
		)
		r.start, r.first = r.now(), step-1
	}
	if r.bar.GetMax() != total {
		r.bar.ChangeMax(total)
	}
	eta := "?"
	if done := step - r.first; done > 0 {
		per := r.now().Sub(r.start) / time.Duration(done)
		eta = (per * time.Duration(max(0, total-step))).Round(time.Second).String()
	}
	// The step count is part of the description (not the bar's own counter),
	// so a throttled render never shows one step's count with another's loss.
	r.bar.Describe(fmt.Sprintf("step %d/%d  epoch %d  loss %.4f  %s tok/s  ETA %s", step, total, epoch+1, loss, humanRate(tps), eta))
	r.bar.Set(step)
}

// Line prints a message above the bar.
func (r *Reporter) Line(s string) {
	if r.w == nil {
		return
	}
	if r.bar != nil {
		r.bar.Clear()
	}
	fmt.Fprintln(r.w, s)
}

// Finish ends the bar's line.
func (r *Reporter) Finish() {
	if r.w == nil || r.bar == nil {
		return
	}
	r.bar.Clear()
}

// FormatFloats formats v with 3 decimals, as the evaluations' summaries
// show their per-head or per-step figures.
func FormatFloats(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.3f", x)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func humanRate(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}
