package loop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/optim"
)

// quad is a trainer whose weights w chase a target per batch (loss
// |w - t|^2 / 2) and are evaluated against a held-out target they cannot
// settle on, so that evaluations get better and worse and early stopping
// happens. Its epochs have different numbers of batches, as EAGLE-3's
// packed ones do; every number comes from the seed, the epoch and the batch.
type quad struct {
	w, g     []float32
	dev      *cpu.Device // its tensors view w and g
	epochs   []int
	epoch    int
	cursor   int
	target   []float32
	exported []float32
}

const quadSize = 5

func newQuad() *quad {
	return &quad{w: make([]float32, quadSize), g: make([]float32, quadSize), dev: cpu.New(nil), epochs: []int{7, 5, 6, 7}, target: make([]float32, quadSize)}
}

// quadMetric is quad's held-out evaluation.
type quadMetric struct {
	Step int     `json:"step"`
	Loss float64 `json:"loss"`
	Best bool    `json:"best"`
}

func (m *quadMetric) Better(b *quadMetric) bool { return m.Loss < b.Loss }

func (m *quadMetric) Record(best bool) any {
	m.Best = best
	return m
}

func (m *quadMetric) Summary() string { return fmt.Sprintf("eval step %d: loss %.4f", m.Step, m.Loss) }

func (q *quad) Device() tensor.Device { return q.dev }

func (q *quad) Params() []optim.Param {
	return []optim.Param{{Name: "w", Data: q.view(q.w), Grad: q.view(q.g)}}
}

// view returns v as a tensor of q's device, viewing v.
func (q *quad) view(v []float32) tensor.Tensor {
	return must(q.dev.Upload(tensor.F32Matrix(v, 1, len(v))))
}

func (q *quad) Plan() Plan {
	return Plan{EpochSteps: q.epochs, Warmup: 2, HeldOut: true, AdamW: optim.DefaultAdamW()}
}

func (q *quad) Seek(epoch int, pos Position) error {
	q.epoch, q.cursor = epoch, pos.Cursor
	return nil
}

func (q *quad) Next() (bool, error) {
	if q.cursor >= q.epochs[q.epoch] {
		return false, nil
	}
	r := rand.New(rand.NewPCG(uint64(q.epoch), uint64(q.cursor)))
	for i := range q.target {
		q.target[i] = float32(r.NormFloat64())
	}
	q.cursor++
	return true, nil
}

func (q *quad) Position() Position { return Position{Cursor: q.cursor} }

func (q *quad) Step() (float64, int) {
	var loss float64
	for i, w := range q.w {
		d := w - q.target[i]
		q.g[i] += d
		loss += float64(d*d) / 2
	}
	return loss, quadSize
}

func (q *quad) Evaluate(e Eval) (*quadMetric, error) {
	var loss float64
	for i, w := range q.w {
		d := float64(w) - math.Sin(float64(i+e.Step))
		loss += d * d
	}
	return &quadMetric{Step: e.Step, Loss: loss}, nil
}

func (q *quad) TrainLine(s StepStats) any {
	return map[string]any{"step": s.Step, "epoch": s.Epoch, "loss": s.Loss, "lr": s.LR, "grad_norm": s.GradNorm}
}

func (q *quad) Export(job *Job, r *Result[*quadMetric]) error {
	q.exported = slices.Clone(q.w)
	return os.WriteFile(filepath.Join(job.Out, "w.json"), must(json.Marshal(q.w)), 0o644)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// quadConfig evaluates every 3 steps and stops after 2 evaluations without
// a better one.
func quadConfig() Config[*quadMetric] {
	return Config[*quadMetric]{Method: "quad", Settings: map[string]any{"lr": 0.3}, LR: 0.3, MinLRRatio: 0.1, ClipNorm: 1,
		Patience: 2, EvalEvery: 3, LogEvery: 1}
}

// quadRun is one finished run: what it returned, exported and logged.
type quadRun struct {
	res     *Result[*quadMetric]
	w       []float32
	metrics []string
}

func runQuad(t *testing.T, ctx context.Context, cfg Config[*quadMetric], out string) (quadRun, error) {
	t.Helper()
	q := newQuad()
	res, err := Run(ctx, cfg, &Job{Out: out}, q)
	if err != nil {
		return quadRun{}, err
	}
	raw, err := os.ReadFile(filepath.Join(out, MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	return quadRun{res: res, w: q.exported, metrics: strings.Split(strings.TrimSpace(string(raw)), "\n")}, nil
}

// same fails unless run b ended exactly as run a.
func same(t *testing.T, what string, a, b quadRun) {
	t.Helper()
	if !slices.Equal(a.w, b.w) {
		t.Errorf("%s: exported weights %v, uninterrupted %v", what, b.w, a.w)
	}
	if !reflect.DeepEqual(a.res, b.res) {
		t.Errorf("%s: result %+v (best %+v), uninterrupted %+v (best %+v)", what, b.res, b.res.Best, a.res, a.res.Best)
	}
	if !slices.Equal(a.metrics, b.metrics) {
		t.Errorf("%s: metrics.jsonl\n%s\nuninterrupted\n%s", what, strings.Join(b.metrics, "\n"), strings.Join(a.metrics, "\n"))
	}
}

// TestResumeAtEveryStep cuts a run at every step, by its step cap and by
// cancelling it, and resumes it: each ends exactly as the uninterrupted run
// (weights, result, metrics.jsonl).
func TestResumeAtEveryStep(t *testing.T) {
	full, err := runQuad(t, context.Background(), quadConfig(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if full.res.Stopped != "early-stop" || full.res.Best == nil || full.res.Best.Step+3 >= full.res.Steps {
		t.Fatalf("uninterrupted run %+v (best %+v) does not stop early some evaluations after its best", full.res, full.res.Best)
	}
	for k := 1; k < full.res.Steps; k++ {
		dir := t.TempDir()
		cut := quadConfig()
		cut.MaxSteps = k
		part, err := runQuad(t, context.Background(), cut, dir)
		if err != nil {
			t.Fatal(err)
		}
		if part.res.Steps != k || part.res.Stopped != "max-steps" {
			t.Fatalf("cut at %d: %+v", k, part.res)
		}
		res := quadConfig()
		res.Resume = true
		got, err := runQuad(t, context.Background(), res, dir)
		if err != nil {
			t.Fatal(err)
		}
		same(t, fmt.Sprintf("cut at step %d", k), full, got)

		dir = t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		cc := quadConfig()
		cc.Progress = func(p Progress[*quadMetric]) {
			if p.Step == k {
				cancel()
			}
		}
		if _, err := runQuad(t, ctx, cc, dir); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "--resume") {
			t.Fatalf("cancelled at %d: %v", k, err)
		}
		got, err = runQuad(t, context.Background(), res, dir)
		if err != nil {
			t.Fatal(err)
		}
		same(t, fmt.Sprintf("cancelled at step %d", k), full, got)
	}
}

// TestEvaluationCadence: without EvalEvery, evaluations come at the end of
// every epoch, whatever its length; the best weights are the ones exported.
func TestEvaluationCadence(t *testing.T) {
	cfg := quadConfig()
	cfg.EvalEvery, cfg.Patience = 0, 0
	var steps []int
	cfg.Progress = func(p Progress[*quadMetric]) {
		if p.Eval != nil {
			steps = append(steps, p.Step)
		}
	}
	r, err := runQuad(t, context.Background(), cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{7, 12, 18, 25}; !slices.Equal(steps, want) || r.res.Stopped != "max-epochs" {
		t.Fatalf("evaluations at steps %v (%s), want %v: the epochs' ends", steps, r.res.Stopped, want)
	}
	q := newQuad()
	copy(q.w, r.w)
	if m, _ := q.Evaluate(Eval{Step: r.res.Best.Step}); m.Loss != r.res.Best.Loss {
		t.Fatalf("exported weights evaluate to %v, the best evaluation was %v", m.Loss, r.res.Best.Loss)
	}
}

// TestLegacyCheckpoint resumes checkpoints whose loop state is laid out as
// the trainers' own loops wrote it before this one: EAGLE-3's (the count of
// evaluations since the best under "bad") in the middle of a run, and
// Medusa's ("completed") at its end. Each ends as the uninterrupted run.
func TestLegacyCheckpoint(t *testing.T) {
	full, err := runQuad(t, context.Background(), quadConfig(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// One step after the evaluation that left one more evaluation of
	// patience: the resumed run must stop at the next one.
	cutAt := full.res.Steps - 2
	type eagle3Extra struct {
		Best      float64     `json:"best"`
		HaveBest  bool        `json:"have_best"`
		BestEval  *quadMetric `json:"best_eval,omitempty"`
		Bad       int         `json:"bad"`
		Done      bool        `json:"done"`
		LastEval  int         `json:"last_eval_step"`
		LossSum   float64     `json:"loss_sum"`
		LossCount int         `json:"loss_count"`
	}
	type medusaExtra struct {
		BestLoss  float64     `json:"best_loss"`
		HaveBest  bool        `json:"have_best"`
		BadEvals  int         `json:"bad_evals"`
		BestEval  *quadMetric `json:"best_eval,omitempty"`
		LastEval  int         `json:"last_eval_step"`
		Completed bool        `json:"completed"`
	}
	for _, c := range []struct {
		name   string
		cut    int
		legacy func(s state[*quadMetric]) any
	}{
		{"eagle3", cutAt, func(s state[*quadMetric]) any {
			return eagle3Extra{s.BestEval.Loss, s.HaveBest, s.BestEval, s.BadEvals, s.Done, s.LastEval, s.LossSum, s.LossCount}
		}},
		{"medusa", 0, func(s state[*quadMetric]) any {
			return medusaExtra{s.BestEval.Loss, s.HaveBest, s.BadEvals, s.BestEval, s.LastEval, s.Done}
		}},
	} {
		dir := t.TempDir()
		cfg := quadConfig()
		cfg.MaxSteps = c.cut
		if _, err := runQuad(t, context.Background(), cfg, dir); err != nil {
			t.Fatal(err)
		}
		s := rewriteExtra(t, filepath.Join(dir, CheckpointFile), c.legacy)
		if c.cut > 0 && s.BadEvals != cfg.Patience-1 {
			t.Fatalf("%s: %d evaluations since the best at step %d; the test needs %d", c.name, s.BadEvals, c.cut, cfg.Patience-1)
		}
		if c.cut == 0 && !s.Done {
			t.Fatalf("%s: the finished run's checkpoint is not done", c.name)
		}
		cfg.MaxSteps, cfg.Resume = 0, true
		got, err := runQuad(t, context.Background(), cfg, dir)
		if err != nil {
			t.Fatal(err)
		}
		if c.cut == 0 {
			if got.res.Stopped != "resumed-complete" {
				t.Fatalf("%s: the finished run resumed as %q", c.name, got.res.Stopped)
			}
			got.res.Stopped = full.res.Stopped
		}
		same(t, c.name+" legacy checkpoint", full, got)
	}
}

// rewriteExtra rewrites the loop state of the checkpoint at path in the
// layout legacy makes of it, and returns the state.
func rewriteExtra(t *testing.T, path string, legacy func(s state[*quadMetric]) any) state[*quadMetric] {
	t.Helper()
	q := newQuad()
	opt, err := optim.NewAdamW(q.dev, q.Params(), optim.DefaultAdamW())
	if err != nil {
		t.Fatal(err)
	}
	st := &optim.TrainState{Buffers: []optim.Param{{Name: "best", Data: q.view(make([]float32, quadSize))}}}
	if err := optim.LoadCheckpoint(path, opt, st); err != nil {
		t.Fatal(err)
	}
	var s state[*quadMetric]
	if err := json.Unmarshal(st.Extra, &s); err != nil {
		t.Fatal(err)
	}
	st.Extra = must(json.Marshal(legacy(s)))
	if bytes.Contains(st.Extra, []byte(`"bad_evals"`)) == bytes.Contains(st.Extra, []byte(`"bad"`)) {
		t.Fatalf("legacy state %s names the count of bad evaluations both ways or neither", st.Extra)
	}
	if err := optim.SaveCheckpoint(path, opt, st); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestResumeSettingsCheck: a resume whose settings differ from the first
// run's is refused naming each difference; the loop's own settings may
// change; a setting the first run's record lacks takes its unrecorded
// value.
func TestResumeSettingsCheck(t *testing.T) {
	dir := t.TempDir()
	cfg := quadConfig()
	cfg.MaxSteps = 4
	cfg.Settings = map[string]any{"lr": 0.3, "max_steps": 4}
	if _, err := runQuad(t, context.Background(), cfg, dir); err != nil {
		t.Fatal(err)
	}
	cfg.Resume = true
	cfg.Settings = map[string]any{"lr": 0.5, "width": 8, "max_steps": 9}
	_, err := runQuad(t, context.Background(), cfg, dir)
	if err == nil || !strings.Contains(err.Error(), "lr: was 0.3, now 0.5") || !strings.Contains(err.Error(), "width: was null, now 8") || strings.Contains(err.Error(), "max_steps") {
		t.Fatalf("resume with another lr and a new setting: %v", err)
	}
	cfg.Settings = map[string]any{"lr": 0.3, "max_steps": 9}
	cfg.Unrecorded = map[string]any{"width": 8}
	if _, err := runQuad(t, context.Background(), cfg, dir); err != nil {
		t.Fatalf("resume with the first run's settings and a new setting at its unrecorded value: %v", err)
	}
	rec, err := os.ReadFile(filepath.Join(dir, ArgsFile))
	if err != nil || !bytes.Contains(rec, []byte(`"width": 8`)) {
		t.Fatalf("%s after the resume: %s (%v), want the width recorded", ArgsFile, rec, err)
	}
}

// TestResumeRefusesAnotherPlan: a resume whose trainer plans another number
// of steps (an epoch cap or batch chosen from the data by another build's
// rule) is refused before it trains, naming both; the same plan resumes.
func TestResumeRefusesAnotherPlan(t *testing.T) {
	dir := t.TempDir()
	cfg := quadConfig()
	cfg.MaxSteps = 3
	if _, err := runQuad(t, context.Background(), cfg, dir); err != nil {
		t.Fatal(err)
	}
	cfg.Resume = true
	q := newQuad()
	q.epochs = append(q.epochs, q.epochs[0])
	_, err := Run(context.Background(), cfg, &Job{Out: dir}, q)
	if err == nil || !strings.Contains(err.Error(), "the checkpoint's schedule spans") || !strings.Contains(err.Error(), "--epochs") {
		t.Fatalf("resume with one more epoch: %v", err)
	}
	cfg.MaxSteps = 0
	if _, err := runQuad(t, context.Background(), cfg, dir); err != nil {
		t.Fatalf("resume with the same plan: %v", err)
	}
}
