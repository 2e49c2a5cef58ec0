package train

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/medusa"
)

// reporter draws the progress bar (step/total, loss, tokens/s, ETA) on w and
// prints one line per held-out evaluation above it. A nil w reports nothing.
type reporter struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	start time.Time
	first int // step at the first report (non-zero after a resume)
	now   func() time.Time
}

func newReporter(w io.Writer) *reporter {
	return &reporter{w: w, now: time.Now}
}

// step records an optimiser step. total is the scheduled cap (early stopping
// may end sooner); tps the trainer's tokens per second.
func (r *reporter) step(step, total, epoch int, loss, tps float64) {
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

// line prints a message above the bar.
func (r *reporter) line(s string) {
	if r.w == nil {
		return
	}
	if r.bar != nil {
		r.bar.Clear()
	}
	fmt.Fprintln(r.w, s)
}

// finish ends the bar's line.
func (r *reporter) finish() {
	if r.w == nil || r.bar == nil {
		return
	}
	r.bar.Clear()
}

func (r *reporter) medusa(p medusa.Progress) {
	r.step(p.Step, p.TotalSteps, p.Epoch, p.Loss, p.TokensPerSec)
	if m := p.Eval; m != nil {
		r.line(fmt.Sprintf("eval step %d: loss %.4f  top-1 %s  top-5 %s  acceptance %.3f  chain %.3f",
			m.Step, m.Loss, fmtFloats(m.Top1), fmtFloats(m.Top5), m.Acceptance, m.Chain))
	}
}

func (r *reporter) eagle3(p eagle3.Progress) {
	if m := p.Eval; m != nil {
		r.line(fmt.Sprintf("eval epoch %d step %d: loss %.4f  acc %s  acceptance %.3f",
			m.Epoch, m.Step, m.Loss, fmtFloats(m.Accuracy), m.AcceptLen))
		return
	}
	r.step(p.Step, p.TotalSteps, p.Epoch, p.Loss, p.TokensPerSec)
}

func fmtFloats(v []float64) string {
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
