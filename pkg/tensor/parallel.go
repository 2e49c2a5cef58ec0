package tensor

import (
	"runtime"
	"sync"
	"sync/atomic"
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

// workerPool is the process-wide set of idle worker goroutines. It is created
// once, on first use, and never changes; the goroutines live as long as the
// process, parked on an unbuffered channel while idle.
type workerPool struct {
	jobs chan *job
	free chan *job // jobs kept for reuse, so that a call allocates nothing
}

var sharedPool = sync.OnceValue(func() *workerPool {
	p := &workerPool{jobs: make(chan *job), free: make(chan *job, 256)}
	for i := 1; i < max(runtime.NumCPU(), runtime.GOMAXPROCS(0)); i++ {
		go func() {
			for j := range p.jobs {
				j.work()
				j.release()
			}
		}()
	}
	return p
})

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
		j.holders.Add(1)
		select {
		case p.jobs <- j:
			continue
		default:
			j.holders.Add(-1)
		}
		break
	}
	j.work()
	if j.holders.Add(-1) != 0 {
		<-j.done
	}
	j.fn, j.fnc = nil, nil
	select {
	case p.free <- j:
	default: // more calls in flight than kept jobs: let this one go
	}
}
