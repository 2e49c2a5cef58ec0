package tensor

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Parallel splits the range [0, n) into at most runtime.GOMAXPROCS(0) contiguous
// chunks of at least minChunk items and calls fn on each, concurrently on a
// shared set of persistent worker goroutines (the caller runs chunks too). It
// runs fn inline when the work is too small to be worth a hand-off. It
// allocates nothing itself; only fn, if it is a closure the caller builds per
// call, may be allocated by the caller. Calls may be nested and made from many
// goroutines at once: a chunk no idle worker takes is run by the caller.
func Parallel(n, minChunk int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	workers := runtime.GOMAXPROCS(0)
	if minChunk < 1 {
		minChunk = 1
	}
	if max := n / minChunk; max < workers {
		workers = max
	}
	if workers <= 1 {
		fn(0, n)
		return
	}
	run(n, workers, fn, nil)
}

// Workers returns how many chunks Parallel and ParallelChunks run at once at
// most: runtime.GOMAXPROCS(0).
func Workers() int { return runtime.GOMAXPROCS(0) }

// ParallelChunks splits [0, n) into exactly min(chunks, n) contiguous chunks of
// near-equal size and calls fn(c, lo, hi) for each, c being the chunk's index
// in 0..chunks-1, concurrently on the same workers as Parallel. The index lets
// fn use per-chunk scratch. Pass a long-lived function value (for example a
// method value stored once) to keep the call allocation-free.
func ParallelChunks(n, chunks int, fn func(c, lo, hi int)) {
	if n <= 0 {
		return
	}
	chunks = min(chunks, n)
	if chunks <= 1 {
		fn(0, 0, n)
		return
	}
	run(n, chunks, nil, fn)
}

// job is one Parallel call: its chunks are claimed in order by the caller and
// by the workers that accepted it.
type job struct {
	fn      func(lo, hi int)
	fnc     func(c, lo, hi int)
	n       int
	chunk   int // items per chunk
	chunks  int
	next    atomic.Int32 // next chunk to claim
	holders atomic.Int32 // the caller plus the workers still holding the job
	done    chan struct{}
}

// work claims and runs chunks until none is left.
func (j *job) work() {
	for {
		c := int(j.next.Add(1)) - 1
		if c >= j.chunks {
			return
		}
		lo := c * j.chunk
		hi := min(lo+j.chunk, j.n)
		if j.fn != nil {
			j.fn(lo, hi)
		} else {
			j.fnc(c, lo, hi)
		}
	}
}

// release drops one holder; the last one to leave after the caller wakes it.
func (j *job) release() {
	if j.holders.Add(-1) == 0 {
		j.done <- struct{}{}
	}
}

// workerPool is the process-wide set of worker goroutines. It is created
// once, on first use, and never changes; the goroutines live as long as the
// process. A worker that finishes a job first spins for up to spinFor,
// watching slot, so that the next call of a sequence of short products (the
// layers of a decode step) reaches it in well under a microsecond; then it
// parks on the unbuffered jobs channel, which a later call reaches through
// the scheduler (tens of microseconds to wake a parked thread on a virtual
// machine).
type workerPool struct {
	jobs     chan *job
	free     chan *job // jobs kept for reuse, so that a call allocates nothing
	slot     atomic.Pointer[job]
	spinners atomic.Int32 // workers spinning on slot
}

// spinFor bounds a worker's busy wait for the next job: long enough to span
// the gap between two products of a forward pass, short enough that an idle
// process stops using the core at once.
const spinFor = 50 * time.Microsecond

var sharedPool = sync.OnceValue(func() *workerPool {
	p := &workerPool{jobs: make(chan *job), free: make(chan *job, 256)}
	for i := 1; i < max(runtime.NumCPU(), runtime.GOMAXPROCS(0)); i++ {
		go p.worker()
	}
	return p
})

// worker runs jobs until the process ends.
func (p *workerPool) worker() {
	for {
		j := p.spin()
		if j == nil {
			j = <-p.jobs
		}
		j.work()
		j.release()
	}
}

// spin waits up to spinFor for a job offered in slot and takes it, or
// returns nil.
func (p *workerPool) spin() *job {
	p.spinners.Add(1)
	defer p.spinners.Add(-1)
	var j *job
	if !waitFor(func() bool {
		j = p.slot.Load()
		return j != nil && p.slot.CompareAndSwap(j, nil)
	}) {
		return nil
	}
	return j
}

// waitFor calls cond until it reports true or spinFor has passed, and
// reports the last result.
func waitFor(cond func() bool) bool {
	var start time.Time
	for i := 1; ; i++ {
		if cond() {
			return true
		}
		if i%256 == 0 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > spinFor {
				return false
			}
			runtime.Gosched() // let other goroutines of a busy process run
		}
	}
}

// offer hands j to one more worker, a spinning one if any, else an idle
// parked one, and reports whether one took it or may still take it. It
// counts the taker as a holder of j.
func (p *workerPool) offer(j *job) bool {
	j.holders.Add(1)
	if p.spinners.Load() > 0 && p.slot.CompareAndSwap(nil, j) {
		return true
	}
	select {
	case p.jobs <- j:
		return true
	default:
		j.holders.Add(-1)
		return false
	}
}

// run executes fn or fnc over [0, n) in the given number of chunks.
func run(n, chunks int, fn func(lo, hi int), fnc func(c, lo, hi int)) {
	p := sharedPool()
	var j *job
	select {
	case j = <-p.free:
	default:
		j = &job{done: make(chan struct{}, 1)}
	}
	j.fn, j.fnc, j.n = fn, fnc, n
	j.chunk = (n + chunks - 1) / chunks
	j.chunks = (n + j.chunk - 1) / j.chunk
	j.next.Store(0)
	j.holders.Store(1)
	// Offer the job to idle workers only: a busy machine (or a nested call)
	// leaves the chunks to the caller instead of queueing behind other work.
	for i := 1; i < j.chunks; i++ {
		if !p.offer(j) {
			break
		}
	}
	j.work()
	// A job left in the slot by a worker that stopped spinning first is
	// taken back: its chunks are all done by now.
	if p.slot.CompareAndSwap(j, nil) {
		j.holders.Add(-1)
	}
	// Wait for the workers' chunks spinning first, for the same reason
	// they spin: parking costs a thread wake-up when they finish.
	waitFor(func() bool { return j.holders.Load() == 1 })
	if j.holders.Add(-1) != 0 {
		<-j.done
	}
	j.fn, j.fnc = nil, nil
	select {
	case p.free <- j:
	default: // more calls in flight than kept jobs: let this one go
	}
}
