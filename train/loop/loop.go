// Package loop is the training loop every drafter method trains with, and
// what it asks of a method. A trainer (train/medusa, train/eagle3) owns its
// batching, its loss and gradient and its held-out metric; the loop owns the
// rest, written once: the warm-up + cosine schedule, gradient clipping and
// the AdamW steps, metrics.jsonl, the checkpoints and the resume (with the one
// check that a resumed run repeats the first run's settings), the
// evaluation cadence, early stopping, the best weights kept and exported,
// the progress report and the stop on cancellation.
//
// A run interrupted at any step (a cancelled context, a step cap, a killed
// process after its last checkpoint) and resumed ends bit-identical to an
// uninterrupted one: every random draw is the trainer's, made from the seed
// and the epoch, and the checkpoint holds the weights, the optimiser's
// moments, the best weights and the data position.
package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/optim"
)

// Metric is a held-out evaluation of a trainer's weights (a pointer type).
type Metric[M any] interface {
	// Better reports whether this evaluation beats b, an earlier one.
	Better(b M) bool
	// Record notes whether this evaluation is the best so far and returns
	// its metrics.jsonl line.
	Record(best bool) any
	// Summary describes the evaluation in one line of the progress report.
	Summary() string
}

// Trainer is one drafter method's side of the loop: its parameters, its
// batches and their loss, and its held-out metric. A trainer draws every
// random number from its seed and the epoch (the held-out split, each
// epoch's order), so that a resumed run repeats them.
type Trainer[M Metric[M]] interface {
	// Device is the device the trainer's parameters live on: the loop's
	// optimiser and best weights live there too (on a sibling of it).
	Device() tensor.Device
	// Params are the trainable tensors with the gradient buffers Step
	// accumulates into, on Device, in a fixed order (the checkpoint's).
	Params() []optim.Param
	// Plan is the run's shape, fixed before the first step.
	Plan() Plan
	// Seek starts epoch's batches at pos, the zero Position being its first
	// batch and any other one a Position returned during that epoch.
	Seek(epoch int, pos Position) error
	// Next reads the epoch's next batch; it returns false after the last.
	Next() (bool, error)
	// Position is where the batch after the one Next read starts.
	Position() Position
	// Step runs the forward and backward passes over the batch Next read,
	// adding to the gradients, and returns the loss and the batch's tokens.
	Step() (loss float64, tokens int)
	// Evaluate measures the current weights on the held-out samples.
	Evaluate(e Eval) (M, error)
	// TrainLine is the metrics.jsonl line of a step.
	TrainLine(s StepStats) any
	// Export writes the weights as they are (the best ones, when an
	// evaluation ran) into job.Out, with what r says of the run.
	Export(job *Job, r *Result[M]) error
}

// Plan is the shape of a run, which the loop's schedule and evaluation
// cadence follow.
type Plan struct {
	// EpochSteps[e] is the number of batches (optimiser steps) of epoch e;
	// its length is the epoch cap. The learning-rate schedule spans their
	// sum, also when MaxSteps cuts the run short.
	EpochSteps []int
	// Warmup is the linear warm-up in steps.
	Warmup int
	// HeldOut says whether there are held-out samples to evaluate on;
	// without them no evaluation runs and the last weights are exported.
	HeldOut bool
	// AdamW configures the optimiser.
	AdamW optim.AdamWConfig
}

// Position is a place in an epoch's batches, as the trainer counts it
// (Medusa: a sample and a position in it; EAGLE-3: a batch). Checkpoints
// record it.
type Position struct {
	Cursor, Offset int
}

// Eval is what an evaluation is told about the run.
type Eval struct {
	// Step is the number of optimiser steps taken; Epoch the epoch
	// (0-based) they are in.
	Step, Epoch int
	// TrainLoss is the mean training loss of the steps since the previous
	// evaluation (0 when none was taken).
	TrainLoss float64
	// Elapsed is the time since the run (re)started.
	Elapsed time.Duration
}

// StepStats is what the loop knows of an optimiser step.
type StepStats struct {
	// Step is the number of steps taken, this one included; Epoch is
	// 0-based.
	Step, Epoch int
	// Loss is the step's loss, LR its learning rate and GradNorm the
	// gradient's global norm before clipping.
	Loss, LR, GradNorm float64
	// Tokens are the batch's tokens and Took the time the step took,
	// reading the batch included.
	Tokens int
	Took   time.Duration
	// TokensPerSec is the tokens per second since the run (re)started.
	TokensPerSec float64
}

// Progress is reported after every step and after every evaluation.
type Progress[M any] struct {
	// Epoch (0-based) and Step are where the run is; TotalSteps is the
	// scheduled number of steps (early stopping may end sooner).
	Epoch, Step, TotalSteps int
	// Loss and LR are those of the latest step.
	Loss, LR float64
	// TokensPerSec is the tokens per second since the run (re)started.
	TokensPerSec float64
	// Eval is set in the report of an evaluation, and is zero (nil) in
	// a step's.
	Eval M
}

// Config is what the loop does with a trainer: the trainer's configuration
// maps onto it.
type Config[M any] struct {
	// Method names the method in train_args.json.
	Method string
	// Settings are the trainer's result-affecting settings as
	// train_args.json records them under "trainer" (its configuration, JSON
	// encoded with the method's names). Unrecorded are the values of
	// settings that a record made before they existed lacks: what that
	// build used. A resume compares every setting but the loop's own
	// "resume", "max_steps", "checkpoint_every" and "log_every", which do not
	// change the trained weights.
	Settings   any
	Unrecorded map[string]any
	// LR is the peak learning rate and MinLRRatio the floor of the cosine
	// decay as a fraction of it; ClipNorm is the global gradient-norm clip
	// (<= 0 disables it).
	LR, MinLRRatio, ClipNorm float64
	// MaxSteps stops the run after that many steps in total (0: no limit);
	// the schedule still spans the epoch cap, so a run cut short and
	// resumed follows the learning rates of one that was not.
	MaxSteps int
	// Patience stops the run after that many evaluations without a better
	// one (0: never early).
	Patience int
	// EvalEvery is the number of steps between evaluations, 0 meaning at
	// the end of every epoch.
	EvalEvery int
	// CheckpointEvery saves a checkpoint every that many steps, besides the
	// one at every evaluation (0: at evaluations only).
	CheckpointEvery int
	// LogEvery writes a training line into metrics.jsonl every that many
	// steps (0: none).
	LogEvery int
	// Resume continues the run whose checkpoint is in the output folder,
	// when there is one.
	Resume bool
	// Progress, when set, is called after every step and evaluation.
	Progress func(Progress[M])
}

// Job is where a run writes and what it records of where it came from.
type Job struct {
	// Out is the output folder (created if needed).
	Out string
	// Settings is the train_args.json record; the loop fills in the method
	// and the trainer's settings (nil: a record of those alone).
	Settings *Settings
	// Provenance is what the export's drafter.json records.
	Provenance Provenance
	// Report draws the progress; nil reports nothing.
	Report *Reporter
}

// Provenance is what drafter.json records of where a drafter came from.
type Provenance struct {
	// BaseModel is the target's Hub id or path.
	BaseModel string
	// TargetFingerprint identifies the exact target weights.
	TargetFingerprint string
	// DataManifests maps each capture's manifest to its SHA-256.
	DataManifests map[string]string
	// Args are the arguments of the run.
	Args any
	// TargetLayers is the target's num_hidden_layers, recorded so that
	// drafter check-export can check feature-layer ids against it.
	TargetLayers int
}

// Result is what a run did.
type Result[M any] struct {
	// Best is the evaluation of the returned and exported weights, the best
	// of the run; nil when no evaluation ran (no held-out samples, or a run
	// cut short before the first), in which case they are the last weights.
	Best M
	// Steps are the steps taken in total (before a resume included), and
	// Epochs the epochs started.
	Steps, Epochs int
	// Stopped says why training ended: "early-stop", "max-epochs",
	// "max-steps" or "resumed-complete".
	Stopped string
}

// The files the loop writes into the output folder.
const (
	// ArgsFile records the settings a resume must repeat; it is written
	// before the first step.
	ArgsFile = "train_args.json"
	// CheckpointFile is the resumable state.
	CheckpointFile = "checkpoint.safetensors"
	// MetricsFile holds one JSON line per logged step and per evaluation.
	MetricsFile = "metrics.jsonl"
)

// Run trains t as cfg says and exports the best weights into job.Out, which
// receives ArgsFile, CheckpointFile and MetricsFile too. When ctx is
// cancelled it saves a checkpoint at the next step and returns an error
// wrapping ctx's; a later Run with cfg.Resume continues and ends
// bit-identical to an uninterrupted run, metrics.jsonl included (timings
// aside).
func Run[M Metric[M]](ctx context.Context, cfg Config[M], job *Job, t Trainer[M]) (*Result[M], error) {
	plan := t.Plan()
	r := &run[M]{cfg: cfg, job: job, t: t, plan: plan, params: t.Params()}
	for _, n := range plan.EpochSteps {
		r.epochEnd = append(r.epochEnd, r.total+n)
		r.total += n
	}
	if r.total == 0 {
		return nil, errors.New("train: the trainer planned no step")
	}
	r.sched = optim.Schedule{Base: cfg.LR, MinRatio: cfg.MinLRRatio, Warmup: plan.Warmup, Total: r.total}
	if err := os.MkdirAll(job.Out, 0o755); err != nil {
		return nil, fmt.Errorf("train: creating the output folder: %w", err)
	}
	if err := r.record(); err != nil {
		return nil, err
	}
	if err := r.restore(); err != nil {
		return nil, err
	}
	var err error
	if r.metrics, err = optim.OpenMetrics(filepath.Join(job.Out, MetricsFile), int(r.opt.StepCount), cfg.Resume); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	defer r.metrics.Close()
	return r.train(ctx)
}

// run is one Run's state.
type run[M Metric[M]] struct {
	cfg      Config[M]
	job      *Job
	t        Trainer[M]
	plan     Plan
	params   []optim.Param
	total    int
	epochEnd []int // steps taken at the end of each epoch
	sched    optim.Schedule
	opt      *optim.AdamW
	dev      tensor.Device   // the optimiser's: a sibling of the trainer's device
	best     []tensor.Tensor // the best weights on dev, each a parameter's shape, views of one [n, 1] tensor
	st       *optim.TrainState
	s        state[M]
	args     []byte // the settings record, as the checkpoints carry it
	ckpt     string
	metrics  *optim.MetricsLog

	// Rates since the run (re)started, and the latest step.
	start      time.Time
	tokens     int
	loss, lr   float64
	tokensRate float64
}

// record checks the settings against the first run's on a resume and
// writes them to ArgsFile.
func (r *run[M]) record() error {
	set := r.job.Settings
	if set == nil {
		set = &Settings{}
		r.job.Settings = set
	}
	if err := set.setTrainer(r.cfg.Method, r.cfg.Settings, r.cfg.Unrecorded); err != nil {
		return err
	}
	if r.cfg.Resume {
		if err := checkResume(r.job.Out, set); err != nil {
			return err
		}
	}
	var err error
	if r.args, err = json.Marshal(set); err != nil {
		return fmt.Errorf("train: encoding the settings: %w", err)
	}
	return writeSettings(r.job.Out, set)
}

// restore sets up the optimiser and the best weights on the trainer's
// device and, on a resume, loads the checkpoint into them.
func (r *run[M]) restore() error {
	r.dev = cpu.SiblingOf(r.t.Device())
	var err error
	if r.opt, err = optim.NewAdamW(r.dev, r.params, r.plan.AdamW); err != nil {
		return err
	}
	n := 0
	for _, p := range r.params {
		n += p.Data.Len()
	}
	// One tensor of the parameters' values one after another (the
	// checkpoint's "best" buffer), as a column so that each parameter's
	// share is a row range.
	all, err := r.dev.Alloc(tensor.F32, n, 1)
	if err != nil {
		return fmt.Errorf("train: the best weights: %w", err)
	}
	r.best = make([]tensor.Tensor, len(r.params))
	off := 0
	for i, p := range r.params {
		r.best[i] = all.RowRange(off, off+p.Data.Len()).Reshape(p.Data.Rows(), p.Data.Cols())
		off += p.Data.Len()
	}
	r.keepBest()
	r.st = &optim.TrainState{Buffers: []optim.Param{{Name: "best", Data: all}}}
	r.ckpt = filepath.Join(r.job.Out, CheckpointFile)
	r.s.PlanSteps = r.total
	if !r.cfg.Resume {
		return nil
	}
	found, err := optim.Resume(r.ckpt, r.opt, r.st, &r.s)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if !found {
		return nil
	}
	if err := r.s.readLegacy(r.st.Extra); err != nil {
		return err
	}
	if r.s.PlanSteps != 0 && r.s.PlanSteps != r.total {
		return fmt.Errorf("train: %s: the checkpoint's schedule spans %d steps, this run's %d: the epoch cap or the batch was chosen from the data by another build's rule; resume with the --epochs and --batch-tokens the run started with (train_args.json, metrics.jsonl), or start over", r.ckpt, r.s.PlanSteps, r.total)
	}
	r.s.PlanSteps = r.total
	return nil
}

// train runs the epochs from where the state stands.
func (r *run[M]) train(ctx context.Context) (*Result[M], error) {
	cfg, st, t := r.cfg, r.st, r.t
	r.start = time.Now()
	if r.s.Done {
		return r.finish("resumed-complete")
	}
	epochs := len(r.plan.EpochSteps)
	for ; st.Epoch < epochs; st.Epoch, st.Cursor, st.Offset = st.Epoch+1, 0, 0 {
		if err := t.Seek(st.Epoch, Position{st.Cursor, st.Offset}); err != nil {
			return nil, err
		}
		for {
			step := int(r.opt.StepCount)
			if cfg.MaxSteps > 0 && step >= cfg.MaxSteps {
				return r.finish("max-steps")
			}
			if err := ctx.Err(); err != nil {
				return nil, r.interrupted(step, err)
			}
			t0 := time.Now()
			ok, err := t.Next()
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			pos := t.Position()
			st.Cursor, st.Offset = pos.Cursor, pos.Offset
			if step, err = r.step(t0); err != nil {
				return nil, err
			}
			evalNow := r.plan.HeldOut && step == r.epochEnd[st.Epoch]
			if cfg.EvalEvery > 0 {
				evalNow = r.plan.HeldOut && step%cfg.EvalEvery == 0
			}
			if evalNow {
				if err := r.evaluate(step); err != nil {
					return nil, err
				}
				if cfg.Patience > 0 && r.s.BadEvals >= cfg.Patience {
					return r.finish("early-stop")
				}
			}
			// Checkpoints come after the step's evaluation, so one written
			// at step s holds everything up to and including step s.
			if evalNow || (cfg.CheckpointEvery > 0 && step%cfg.CheckpointEvery == 0) {
				if err := r.save(); err != nil {
					return nil, err
				}
			}
		}
	}
	st.Epoch = epochs - 1
	if step := int(r.opt.StepCount); r.plan.HeldOut && r.s.LastEval != step {
		// A final evaluation so that the last weights compete for "best".
		if err := r.evaluate(step); err != nil {
			return nil, err
		}
	}
	return r.finish("max-epochs")
}

// step trains on the batch Next read, logs and reports it, and returns the
// number of steps taken.
func (r *run[M]) step(t0 time.Time) (int, error) {
	step := int(r.opt.StepCount)
	lr := r.sched.LR(step)
	loss, tokens, norm, err := optimStep(r.opt, r.t, r.cfg.ClipNorm, lr)
	if err != nil {
		return 0, err
	}
	step++
	r.s.LossSum += loss
	r.s.LossCount++
	r.tokens += tokens
	r.loss, r.lr = loss, lr
	if el := time.Since(r.start).Seconds(); el > 0 {
		r.tokensRate = float64(r.tokens) / el
	}
	if r.cfg.LogEvery > 0 && step%r.cfg.LogEvery == 0 {
		line := r.t.TrainLine(StepStats{Step: step, Epoch: r.st.Epoch, Loss: loss, LR: lr, GradNorm: norm,
			Tokens: tokens, Took: time.Since(t0), TokensPerSec: r.tokensRate})
		if err := r.log(line); err != nil {
			return 0, err
		}
	}
	var none M
	r.report(step, none, false)
	return step, nil
}

// optimStep is one optimiser step of t at learning rate lr: the gradients
// zeroed, the trainer's forward and backward over the batch Next read, the
// global norm clipped to clip and AdamW's update. It returns the loss, the
// batch's tokens and the norm before clipping; a loss that is not finite
// is an error.
func optimStep[M Metric[M]](opt *optim.AdamW, t Trainer[M], clip, lr float64) (loss float64, tokens int, norm float64, err error) {
	opt.ZeroGrad()
	loss, tokens = t.Step()
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, 0, 0, fmt.Errorf("train: the training loss became %v at step %d (lower the learning rate)", loss, opt.StepCount)
	}
	norm = opt.ClipGradNorm(clip)
	opt.Step(lr)
	return loss, tokens, norm, nil
}

// evaluate evaluates the weights after step, keeps them when they are the
// best so far, logs and reports the evaluation and counts the evaluations
// since the best.
func (r *run[M]) evaluate(step int) error {
	e := Eval{Step: step, Epoch: r.st.Epoch, Elapsed: time.Since(r.start)}
	if r.s.LossCount > 0 {
		e.TrainLoss = r.s.LossSum / float64(r.s.LossCount)
	}
	m, err := r.t.Evaluate(e)
	if err != nil {
		return err
	}
	r.s.LossSum, r.s.LossCount, r.s.LastEval = 0, 0, step
	best := !r.s.HaveBest || m.Better(r.s.BestEval)
	if best {
		r.s.HaveBest, r.s.BadEvals, r.s.BestEval = true, 0, m
		r.keepBest()
	} else {
		r.s.BadEvals++
	}
	if err := r.log(m.Record(best)); err != nil {
		return err
	}
	r.report(step, m, true)
	return nil
}

// report passes a step's progress on, or an evaluation's (isEval).
func (r *run[M]) report(step int, eval M, isEval bool) {
	p := Progress[M]{Epoch: r.st.Epoch, Step: step, TotalSteps: r.total, Loss: r.loss, LR: r.lr, TokensPerSec: r.tokensRate, Eval: eval}
	if rep := r.job.Report; rep != nil {
		if !isEval {
			rep.step(step, r.total, r.st.Epoch, r.loss, r.tokensRate)
		} else {
			rep.Line(eval.Summary())
		}
	}
	if r.cfg.Progress != nil {
		r.cfg.Progress(p)
	}
}

// finish saves the final checkpoint (it keeps the current weights: a
// max-steps run may be resumed), puts the best weights back and exports
// them.
func (r *run[M]) finish(reason string) (*Result[M], error) {
	r.s.Done = reason != "max-steps"
	if err := r.save(); err != nil {
		return nil, err
	}
	res := &Result[M]{Steps: int(r.opt.StepCount), Epochs: r.st.Epoch + 1, Stopped: reason}
	if r.s.HaveBest {
		for i, p := range r.params {
			r.dev.Copy(p.Data, r.best[i])
		}
		res.Best = r.s.BestEval
	}
	if err := r.t.Export(r.job, res); err != nil {
		return nil, err
	}
	return res, nil
}

// interrupted saves a checkpoint after a cancellation and says how to go on.
func (r *run[M]) interrupted(step int, err error) error {
	if serr := r.save(); serr != nil {
		return errors.Join(err, serr)
	}
	return fmt.Errorf("train: interrupted at step %d; the checkpoint in %s keeps the progress: run the same command with --resume to continue (%w)", step, r.job.Out, err)
}

// keepBest copies the parameters into the best weights, on the device.
func (r *run[M]) keepBest() {
	for i, p := range r.params {
		r.dev.Copy(r.best[i], p.Data)
	}
}

// save writes the checkpoint.
func (r *run[M]) save() error {
	extra, err := json.Marshal(r.s)
	if err != nil {
		return fmt.Errorf("train: encoding the loop state: %w", err)
	}
	r.st.Args, r.st.Extra = r.args, extra
	return optim.SaveCheckpoint(r.ckpt, r.opt, r.st)
}

// log appends a line to metrics.jsonl.
func (r *run[M]) log(v any) error {
	if err := r.metrics.Write(v); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}
