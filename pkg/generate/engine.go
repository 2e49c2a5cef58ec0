package generate

import (
	"context"
	"fmt"
	"time"

	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/tensor"
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
	// HostSampling samples on the host (pkg/sample) even where the device
	// could (see Engine): the tests compare the two paths with it.
	HostSampling bool
	// SyncCapture reads the tapped states to the host at the end of each
	// pass even on a device that could copy them behind the next one (see
	// Engine): the tests compare the two paths with it.
	SyncCapture bool
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
//
// Where Params allows it (no top-k, top-p or min-p: DeviceSamples), a pass's
// logits stay on the model's device and tensor.Device.SampleRows draws the
// tokens there, with one uniform per row drawn on the host from the job's
// own random stream, as pkg/sample draws it, so that the stream stays
// (seed, job) and the tokens are the host sampler's (bit for bit on the CPU
// device, which runs tensor.SampleRow; at temperature 0 on every device).
// Top-k, top-p and min-p need a sort or a selection over the vocabulary,
// which the device does not run: with any of them the logits come to the
// host and pkg/sample draws.
//
// On a device that copies tensors to the host behind its computation
// (tensor.StateCopier: the GPU), a pass's tapped states stay on the device
// and go to pinned host memory on a second stream, in one of two buffers,
// while the host samples and the device runs the next pass; the host
// appends them to the jobs' state buffers one pass later (or at once when a
// job of the pass ended, so that it is emitted complete). Call Close to free
// the copier.
type Engine struct {
	m       *model.Model
	opt     EngineOptions
	sampler *sample.Sampler
	// devSample says that tokens are drawn on the device; ids and u are
	// its buffers, a value per logits row of a pass.
	devSample bool
	ids       []int32
	u         []float64
	// copier copies the tapped states behind the next pass (nil: read at
	// the end of each pass); pend are its two buffers' passes.
	copier tensor.StateCopy
	pend   [2]pendingCopy
	stop   map[int]struct{}
	pool   []*model.Sequence
	free   [][][]float32 // recycled state buffers
	batch  []model.Input
	owner  []*slot
	stats  Stats
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
	e := &Engine{m: m, opt: opt, sampler: s, stop: map[int]struct{}{},
		devSample: !opt.HostSampling && DeviceSamples(opt.Params, m.VocabSize())}
	if sc, ok := m.Device().(tensor.StateCopier); ok && len(opt.Taps) > 0 && !opt.SyncCapture {
		if e.copier, err = sc.NewStateCopy(len(opt.Taps), m.HiddenSize()); err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
	}
	for _, id := range opt.Stop {
		e.stop[id] = struct{}{}
	}
	return e, nil
}

// DeviceSamples reports whether p draws tokens on the device
// (tensor.Device.SampleRows): greedy, or temperature alone, without top-k
// (or one of at least the vocabulary), top-p (or 1) or min-p, which the
// device does not apply.
func DeviceSamples(p sample.Params, vocab int) bool {
	return (p.TopK == 0 || p.TopK >= vocab) && (p.TopP == 0 || p.TopP == 1) && p.MinP == 0
}

// pendingCopy is a pass whose states are in flight to a host buffer: the
// slots of its inputs, in order, and each input's first row (model.Result's
// Start).
type pendingCopy struct {
	owners []*slot
	start  []int
	active bool
}

// Close frees what the engine holds on the device besides its sequences
// (the state copier); the engine is not used afterwards.
func (e *Engine) Close() error {
	if e.copier == nil {
		return nil
	}
	err := e.copier.Close()
	e.copier = nil
	return err
}

// CapturesAsync reports whether tapped states are copied behind the next
// pass (tensor.StateCopier) instead of read at the end of each pass.
func (e *Engine) CapturesAsync() bool { return e.copier != nil }

// SamplesOnDevice reports whether the engine draws its tokens on the device.
func (e *Engine) SamplesOnDevice() bool { return e.devSample }

// Stats returns the counters accumulated so far.
func (e *Engine) Stats() Stats { return e.stats }

// getSeq returns an empty sequence: a released one when there is one, so
// that runs reuse cache memory, else a new one of the engine's capacity.
func (e *Engine) getSeq() (*model.Sequence, error) {
	if n := len(e.pool); n > 0 {
		s := e.pool[n-1]
		e.pool = e.pool[:n-1]
		s.Reset()
		return s, nil
	}
	return e.m.NewSequence(e.opt.Capacity)
}

// getStates returns empty per-tap state buffers, recycled ones when there
// are some so that their memory is reused.
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

// release returns a slot's sequence and state buffers for later slots.
func (e *Engine) release(s *slot) {
	e.pool = append(e.pool, s.seq)
	if s.states != nil {
		e.free = append(e.free, s.states)
	}
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
	if err := e.checkJobs(jobs); err != nil {
		return err
	}
	r := &run{e: e, jobs: jobs, emit: emit, taps: len(e.opt.Taps) > 0, fopt: model.Options{Taps: e.opt.Taps, DeviceLogits: e.devSample, DeviceTaps: e.copier != nil},
		h: e.m.HiddenSize(), slots: make([]*slot, 0, 2*e.opt.Batch), finished: map[int]*slot{}}
	defer r.releaseAll()
	for r.nextEmit < len(jobs) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := r.step(); err != nil {
			return err
		}
	}
	return nil
}

// checkJobs refuses, before anything runs, a job with no prompt, no token
// budget or more positions than a sequence holds.
func (e *Engine) checkJobs(jobs []Job) error {
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
	return nil
}

// run is the state of one Run call.
type run struct {
	e        *Engine
	jobs     []Job
	emit     func(Done) error
	taps     bool // whether states are captured
	fopt     model.Options
	h        int           // the model's hidden size
	slots    []*slot       // the jobs in flight, in job order
	finished map[int]*slot // ended jobs waiting for their turn to be emitted, by job index
	nextJob  int           // the next job to admit
	nextEmit int           // the next job to emit
	pass     int           // passes run, whose parity picks the state copy's buffer
	ended    bool          // a job's last row was in the pass just sampled
}

// releaseAll hands back the slots still held when Run returns, after an
// error or a cancellation; each slot is either in flight or finished, never
// both.
func (r *run) releaseAll() {
	for b := range r.e.pend {
		if r.e.pend[b].active { // a run that stopped early: the copy must end before the buffer is reused
			r.e.copier.Wait(b)
			r.e.pend[b].active = false
		}
	}
	for _, s := range r.slots {
		r.e.release(s)
	}
	for _, s := range r.finished {
		r.e.release(s)
	}
}

// step advances every job in flight by one forward pass: it admits new
// jobs, runs the pass (their prefill, one decode row per generating job,
// the capture-only row of each job that just ended), samples the next
// tokens, retires the jobs that ended and emits those whose turn came.
func (r *run) step() error {
	if err := r.admit(); err != nil {
		return err
	}
	res, err := r.forward()
	if err != nil {
		return err
	}
	b := r.pass % 2
	r.pass++
	if r.e.copier != nil {
		r.consume(1 - b) // the pass before: its copy ran while this one computed
		r.startCopy(b, res)
	}
	if err := r.sampleAll(res); err != nil {
		return err
	}
	if r.e.copier != nil && r.ended {
		r.consume(b) // a job ended in this pass: its states must be complete to emit it
	}
	return r.emitReady()
}

// startCopy queues the copy of the pass's tapped states to host buffer b
// and remembers whose rows they are.
func (r *run) startCopy(b int, res *model.Result) {
	p := &r.e.pend[b]
	p.owners = append(p.owners[:0], r.e.owner...)
	p.start = append(p.start[:0], res.Start...)
	p.active = true
	r.e.copier.Start(b, res.DeviceHidden)
}

// consume waits for host buffer b's copy, when one is in flight, and
// appends each slot's rows of it to the slot's states.
func (r *run) consume(b int) {
	e := r.e
	p := &e.pend[b]
	if !p.active {
		return
	}
	t0 := time.Now()
	st := e.copier.Wait(b)
	p.active = false
	for i, s := range p.owners {
		lo, hi := p.start[i]*r.h, p.start[i+1]*r.h
		for t := range st {
			s.states[t] = append(s.states[t], st[t][lo:hi]...)
		}
	}
	clear(p.owners) // no slot outlives its emission here
	e.stats.Copy += time.Since(t0)
}

// admit starts jobs in job order while fewer than Batch jobs generate;
// capture-only rows of ending jobs ride along without counting.
func (r *run) admit() error {
	running := 0
	for _, s := range r.slots {
		if !s.final {
			running++
		}
	}
	for running < r.e.opt.Batch && r.nextJob < len(r.jobs) {
		s, err := r.newSlot(r.nextJob)
		if err != nil {
			return err
		}
		r.slots = append(r.slots, s)
		r.nextJob++
		running++
	}
	return nil
}

// newSlot starts job: an empty sequence, the job's own random stream and,
// when capturing, empty state buffers.
func (r *run) newSlot(job int) (*slot, error) {
	seq, err := r.e.getSeq()
	if err != nil {
		return nil, err
	}
	s := &slot{job: job, seq: seq}
	s.rng.Reset(r.e.opt.Seed, r.jobs[job].Stream)
	if r.taps {
		s.states = r.e.getStates()
	}
	return s, nil
}

// forward runs one model pass over every slot and captures the tapped
// states.
func (r *run) forward() (*model.Result, error) {
	e := r.e
	r.buildBatch()
	t0 := time.Now()
	res, err := e.m.Forward(e.batch, r.fopt)
	t1 := time.Now()
	e.stats.Forward += t1.Sub(t0)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	e.stats.Forwards++
	e.stats.Rows += int64(res.Start[len(e.batch)])
	if r.taps && e.copier == nil {
		r.capture(res)
		e.stats.Copy += time.Since(t1)
	}
	return res, nil
}

// buildBatch lays out the pass: one input per slot, in slot order, and the
// slot each input belongs to.
func (r *run) buildBatch() {
	e := r.e
	e.batch = e.batch[:0]
	e.owner = e.owner[:0]
	for _, s := range r.slots {
		e.batch = append(e.batch, r.input(s))
		e.owner = append(e.owner, s)
	}
}

// input is slot s's share of the next pass: its prompt (prefill) when it
// has just started, else the token it sampled last, with the logits to
// sample from unless only its capture-only row is left.
func (r *run) input(s *slot) model.Input {
	switch {
	case s.seq.Len() == 0:
		return model.Input{Seq: s.seq, Tokens: r.jobs[s.job].Prompt, Logits: model.LogitsLast}
	case s.final:
		return model.Input{Seq: s.seq, Tokens: s.next[:], Logits: model.LogitsNone}
	default:
		return model.Input{Seq: s.seq, Tokens: s.next[:], Logits: model.LogitsLast}
	}
}

// capture appends each slot's rows of every tap to its states.
func (r *run) capture(res *model.Result) {
	for b, s := range r.e.owner {
		for t := range r.e.opt.Taps {
			s.states[t] = append(s.states[t], res.HiddenOf(t, b)...)
		}
	}
}

// sampleAll samples the next token of every generating slot of the pass
// and retires the slots whose jobs ended. On an error the slots not yet
// looked at stay in flight, so that every slot is released once.
func (r *run) sampleAll(res *model.Result) error {
	e := r.e
	t0 := time.Now()
	if e.devSample {
		r.drawOnDevice(res)
	}
	keep := r.slots[:0]
	r.ended = false
	for b, s := range e.owner {
		if s.final {
			r.finished[s.job] = s
			r.ended = true
			continue
		}
		var id int
		var err error
		if e.devSample {
			id, err = r.deviceToken(s, res, res.LogitStart[b])
		} else {
			if id, err = e.sampler.Sample(res.LogitsOf(b), &s.rng); err != nil {
				err = &JobError{Job: s.job, Token: len(s.gen), Err: err}
			}
		}
		if err == nil {
			err = r.accept(s, id)
		}
		if err != nil {
			r.slots = append(keep, e.owner[b:]...)
			return err
		}
		keep = r.retire(keep, s)
	}
	clear(r.slots[len(keep):])
	r.slots = keep
	e.stats.Sample += time.Since(t0)
	return nil
}

// drawOnDevice draws every logits row's token of the pass on the device
// into e.ids: first the generating slots' uniforms, in slot order, each from
// its own stream (one per token, as pkg/sample's SampleProbs draws it; none
// when greedy).
func (r *run) drawOnDevice(res *model.Result) {
	e := r.e
	n := res.DeviceLogits.Rows()
	if cap(e.ids) < n {
		e.ids, e.u = make([]int32, n), make([]float64, n)
	}
	e.ids, e.u = e.ids[:n], e.u[:n]
	greedy := e.opt.Params.Greedy()
	for b, s := range e.owner {
		if !s.final && !greedy {
			e.u[res.LogitStart[b]] = s.rng.Float64()
		}
	}
	e.m.Device().SampleRows(e.ids, res.DeviceLogits, e.opt.Params.Temperature, e.u)
}

// deviceToken is slot s's token drawn on the device from logits row row; a
// row the device found nothing to draw from (a NaN, +Inf, or only -Inf)
// comes to the host, where the sampler says what is wrong with it.
func (r *run) deviceToken(s *slot, res *model.Result, row int) (int, error) {
	if id := r.e.ids[row]; id >= 0 {
		return int(id), nil
	}
	logits := make([]float32, res.DeviceLogits.Cols()) // the failing path only
	r.e.m.Device().Read(logits, res.DeviceLogits.RowRange(row, row+1))
	_, err := r.e.sampler.Sample(logits, &s.rng)
	if err == nil {
		err = fmt.Errorf("generate: the device found no token to draw from logits the host sampler accepts")
	}
	return 0, &JobError{Job: s.job, Token: len(s.gen), Err: err}
}

// accept appends slot s's sampled token id to its generation, streams it
// and sets the finish reason when the job ended.
func (r *run) accept(s *slot, id int) error {
	e := r.e
	e.stats.Generated++
	s.gen = append(s.gen, id)
	s.next[0] = id
	if e.opt.OnToken != nil {
		if err := e.opt.OnToken(s.job, id); err != nil {
			return err
		}
	}
	s.finish = e.finishReason(id, len(s.gen), r.jobs[s.job].MaxNew)
	return nil
}

// finishReason tells whether a generation that just produced id, its
// generated-th token, has ended, and why; "" when it goes on.
func (e *Engine) finishReason(id, generated, maxNew int) string {
	if _, isStop := e.stop[id]; isStop {
		return FinishEOS
	}
	if generated >= maxNew {
		return FinishLength
	}
	return ""
}

// retire decides where a just-sampled slot goes and returns keep, the slots
// that stay in flight: a generating one stays; an ended one stays for the
// capture-only row of its last token when states are captured, else waits
// in finished to be emitted.
func (r *run) retire(keep []*slot, s *slot) []*slot {
	switch {
	case s.finish == "":
		return append(keep, s)
	case r.taps:
		s.final = true
		return append(keep, s)
	}
	r.finished[s.job] = s
	return keep
}

// emitReady emits, in job order, the finished jobs whose turn has come.
func (r *run) emitReady() error {
	for {
		s, ok := r.finished[r.nextEmit]
		if !ok {
			return nil
		}
		delete(r.finished, r.nextEmit)
		if err := r.report(s); err != nil {
			return err
		}
		r.nextEmit++
	}
}

// report hands a finished job to emit, after checking that it captured a
// state row for every position, and releases its slot.
func (r *run) report(s *slot) error {
	if r.taps {
		n := len(r.jobs[s.job].Prompt) + len(s.gen)
		for t := range s.states {
			if len(s.states[t]) != n*r.h {
				return fmt.Errorf("generate: internal error: job %d captured %d state rows for %d positions", s.job, len(s.states[t])/r.h, n)
			}
		}
	}
	err := r.emit(Done{Job: s.job, Tokens: s.gen, Finish: s.finish, States: s.states})
	r.e.release(s)
	return err
}
