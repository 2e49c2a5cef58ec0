package model

import "sync"

// pool runs fn over a range split across persistent worker goroutines. Unlike
// spawning goroutines per call it allocates nothing, which keeps the decode
// loop allocation-free. fn receives the index of the worker running the chunk
// (0..size-1), so it can use per-worker scratch.
type pool struct {
	size  int // workers, counting the calling goroutine
	tasks chan task
	wg    sync.WaitGroup
	once  sync.Once
}

type task struct {
	fn             func(worker, lo, hi int)
	worker, lo, hi int
}

func newPool(size int) *pool {
	if size < 1 {
		size = 1
	}
	p := &pool{size: size, tasks: make(chan task, size)}
	for i := 1; i < size; i++ {
		go func() {
			for t := range p.tasks {
				t.fn(t.worker, t.lo, t.hi)
				p.wg.Done()
			}
		}()
	}
	return p
}

// run splits [0, n) into at most size chunks of at least minChunk items. fn
// must be a long-lived function value (a method value stored once), so that
// passing it allocates nothing.
func (p *pool) run(n, minChunk int, fn func(worker, lo, hi int)) {
	workers := p.size
	if minChunk < 1 {
		minChunk = 1
	}
	if w := n / minChunk; w < workers {
		workers = w
	}
	if workers <= 1 {
		if n > 0 {
			fn(0, 0, n)
		}
		return
	}
	chunk := (n + workers - 1) / workers
	w := 1
	for lo := chunk; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		p.wg.Add(1)
		p.tasks <- task{fn: fn, worker: w, lo: lo, hi: hi}
		w++
	}
	fn(0, 0, min(chunk, n))
	p.wg.Wait()
}

func (p *pool) close() { p.once.Do(func() { close(p.tasks) }) }
