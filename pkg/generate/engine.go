package generate

import (
	"context"
	"fmt"
	"time"

	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
)

// Finish reasons.
const (
	FinishEOS    = "eos"    // a stop id (eos or end-of-turn) was generated; it is the last token
	FinishLength = "length" // the token budget ran out
)

// Job is one sequence to generate.
type Job struct {
	// Stream numbers the job's random stream: its randomness is
	// sample.NewRNG(seed, Stream) and nothing else (distill uses the global
	// sample index).
	Stream uint64
	// Prompt are the input ids, at least one.
	Prompt []int
	// MaxNew is the number of tokens that may be generated, at least one;
	// len(Prompt)+MaxNew must fit the engine's capacity.
	MaxNew int
}

// Done is a finished job, handed to the caller in job order.
type Done struct {
	// Job is the index of the job in the list given to Run.
	Job int
	// Tokens are the generated ids, ending with the stop id when Finish is
	// FinishEOS.
	Tokens []int
	// Finish is FinishEOS or FinishLength.
	Finish string
	// States holds, per tap of EngineOptions.Taps, the hidden states of every
	// position of prompt+Tokens, row-major [len(Prompt)+len(Tokens), H]. They
	// come from the passes that generated the tokens: the prefill for the
	// prompt, each decode step for the token it consumed, and one extra
	// capture-only row for the last generated token (which no generating pass
	// consumes). Nil without taps. The slices are reused after the emit
	// callback returns: copy what must outlive it.
	States [][]float32
}

// EngineOptions configure an Engine.
type EngineOptions struct {
	// Params is the decoding rule; Seed keys every job's random stream.
	Params sample.Params
	Seed   uint64
	// Stop ends a generation when generated.
	Stop []int
	// Batch is the most sequences decoded together (at least 1).
	Batch int
	// Capacity is the longest prompt+generation any job needs (KV cache
	// positions per sequence).
	Capacity int
	// Taps are model tap indices (model.Options.Taps) to capture for every
	// position; empty captures nothing.
	Taps []int
	// OnToken, when set, is called with each generated token as soon as it is
	// sampled (streaming). An error stops Run.
	OnToken func(job, id int) error
}

// Stats are counters an Engine accumulates over its runs.
type Stats struct {
	// Forwards is the number of model forward passes; Rows the rows they held.
	Forwards, Rows int64
	// Generated is the number of sampled tokens.
	Generated int64
	// Forward is the time spent in model.Forward, Sample in sampling, Copy in
	// copying tapped states into per-job buffers.
	Forward, Sample, Copy time.Duration
}

// slot is one sequence in flight.
type slot struct {
	job    int
	seq    *model.Sequence
	rng    sample.RNG
	gen    []int
	states [][]float32
	next   [1]int // token to feed next
	final  bool   // only the capture-only row of the last token is left
	finish string // set once generation ended
}

// Engine decodes many sequences together: every forward pass holds the
// prefill of newly started jobs, one decode row per running job and the
// capture-only row of jobs that just finished, so the GPU-free CPU path keeps
// its matrix multiplies wide. It is not safe for concurrent use.
type Engine struct {
	m       *model.Model
	opt     EngineOptions
	sampler *sample.Sampler
	stop    map[int]struct{}
	pool    []*model.Sequence
	free    [][][]float32 // recycled state buffers
	batch   []model.Input
	owner   []*slot
	stats   Stats
}

// NewEngine prepares an engine over m.
func NewEngine(m *model.Model, opt EngineOptions) (*Engine, error) {
	if opt.Batch < 1 {
		return nil, fmt.Errorf("generate: batch %d: want at least 1", opt.Batch)
	}
	if opt.Capacity < 2 || opt.Capacity > m.MaxPositions() {
		return nil, fmt.Errorf("generate: sequence capacity %d: want 2..%d (the model's context)", opt.Capacity, m.MaxPositions())
	}
	if len(opt.Stop) == 0 {
		return nil, fmt.Errorf("generate: no stop ids; generation could never end at an end of sequence")
	}
	s, err := sample.NewSampler(m.VocabSize(), opt.Params)
	if err != nil {
		return nil, err
	}
	e := &Engine{m: m, opt: opt, sampler: s, stop: map[int]struct{}{}}
	for _, id := range opt.Stop {
		e.stop[id] = struct{}{}
	}
	return e, nil
}

// Stats returns the counters accumulated so far.
func (e *Engine) Stats() Stats { return e.stats }

func (e *Engine) getSeq() (*model.Sequence, error) {
	if n := len(e.pool); n > 0 {
		s := e.pool[n-1]
		e.pool = e.pool[:n-1]
		s.Reset()
		return s, nil
	}
	return e.m.NewSequence(e.opt.Capacity)
}

func (e *Engine) getStates() [][]float32 {
	if n := len(e.free); n > 0 {
		st := e.free[n-1]
		e.free = e.free[:n-1]
		for i := range st {
			st[i] = st[i][:0]
		}
		return st
	}
	return make([][]float32, len(e.opt.Taps))
}

// Run generates jobs and calls emit for each, in job order. The jobs of one
// call are scheduled as a unit: slots are filled in job order and refilled as
// jobs finish, so the composition of every forward pass is a function of the
// jobs and Batch alone. (Floating-point results of a row can depend on the
// other rows of its pass, through the matrix multiply kernels; distill relies
// on this determinism for restarts that reproduce a run bit for bit.)
//
// Run stops at the first error, including ctx's cancellation, and emits
// nothing after it.
func (e *Engine) Run(ctx context.Context, jobs []Job, emit func(Done) error) error {
	for i, j := range jobs {
		if len(j.Prompt) == 0 {
			return fmt.Errorf("generate: job %d: empty prompt", i)
		}
		if j.MaxNew < 1 {
			return fmt.Errorf("generate: job %d: no room to generate (budget %d)", i, j.MaxNew)
		}
		if len(j.Prompt)+j.MaxNew > e.opt.Capacity {
			return fmt.Errorf("generate: job %d: %d prompt tokens + %d new exceed the sequence capacity %d", i, len(j.Prompt), j.MaxNew, e.opt.Capacity)
		}
	}
	taps := len(e.opt.Taps) > 0
	fopt := model.Options{Taps: e.opt.Taps}
	H := e.m.HiddenSize()
	slots := make([]*slot, 0, 2*e.opt.Batch)
	finished := map[int]*slot{}
	nextJob, nextEmit := 0, 0
	release := func(s *slot) {
		e.pool = append(e.pool, s.seq)
		if s.states != nil {
			e.free = append(e.free, s.states)
		}
	}
	defer func() {
		for _, s := range slots {
			release(s)
		}
		for _, s := range finished {
			release(s)
		}
	}()
	for nextEmit < len(jobs) {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Fill: running jobs (generating) count against Batch; capture-only
		// rows of finishing jobs ride along.
		running := 0
		for _, s := range slots {
			if !s.final {
				running++
			}
		}
		for running < e.opt.Batch && nextJob < len(jobs) {
			seq, err := e.getSeq()
			if err != nil {
				return err
			}
			s := &slot{job: nextJob, seq: seq}
			s.rng.Reset(e.opt.Seed, jobs[nextJob].Stream)
			if taps {
				s.states = e.getStates()
			}
			slots = append(slots, s)
			nextJob++
			running++
		}
		e.batch = e.batch[:0]
		e.owner = e.owner[:0]
		for _, s := range slots {
			in := model.Input{Seq: s.seq}
			switch {
			case s.seq.Len() == 0:
				in.Tokens = jobs[s.job].Prompt
				in.Logits = model.LogitsLast
			case s.final:
				in.Tokens = s.next[:]
				in.Logits = model.LogitsNone
			default:
				in.Tokens = s.next[:]
				in.Logits = model.LogitsLast
			}
			e.batch = append(e.batch, in)
			e.owner = append(e.owner, s)
		}
		t0 := time.Now()
		res, err := e.m.Forward(e.batch, fopt)
		t1 := time.Now()
		e.stats.Forward += t1.Sub(t0)
		if err != nil {
			return fmt.Errorf("generate: %w", err)
		}
		e.stats.Forwards++
		e.stats.Rows += int64(res.Start[len(e.batch)])
		if taps {
			for b, s := range e.owner {
				for t := range e.opt.Taps {
					s.states[t] = append(s.states[t], res.HiddenOf(t, b)...)
				}
			}
			e.stats.Copy += time.Since(t1)
		}
		t2 := time.Now()
		keep := slots[:0]
		for b, s := range e.owner {
			if s.final {
				finished[s.job] = s
				continue
			}
			id, err := e.sampler.Sample(res.LogitsOf(b), &s.rng)
			if err != nil {
				return &JobError{Job: s.job, Token: len(s.gen), Err: err}
			}
			e.stats.Generated++
			s.gen = append(s.gen, id)
			s.next[0] = id
			if e.opt.OnToken != nil {
				if err := e.opt.OnToken(s.job, id); err != nil {
					return err
				}
			}
			_, isStop := e.stop[id]
			switch {
			case isStop:
				s.finish = FinishEOS
			case len(s.gen) >= jobs[s.job].MaxNew:
				s.finish = FinishLength
			}
			if s.finish == "" {
				keep = append(keep, s)
				continue
			}
			if taps {
				s.final = true
				keep = append(keep, s)
				continue
			}
			finished[s.job] = s
		}
		for i := len(keep); i < len(slots); i++ {
			slots[i] = nil
		}
		slots = keep
		e.stats.Sample += time.Since(t2)
		for {
			s, ok := finished[nextEmit]
			if !ok {
				break
			}
			delete(finished, nextEmit)
			if taps {
				for t := range s.states {
					if len(s.states[t]) != (len(jobs[s.job].Prompt)+len(s.gen))*H {
						return fmt.Errorf("generate: internal error: job %d captured %d state rows for %d positions", s.job, len(s.states[t])/H, len(jobs[s.job].Prompt)+len(s.gen))
					}
				}
			}
			err := emit(Done{Job: s.job, Tokens: s.gen, Finish: s.finish, States: s.states})
			release(s)
			if err != nil {
				return err
			}
			nextEmit++
		}
	}
	return nil
}
