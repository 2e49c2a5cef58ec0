package tensor

import (
	"runtime"
	"sync"
)

// Parallel splits the range [0, n) into at most runtime.GOMAXPROCS(0) contiguous
// chunks of at least minChunk items and calls fn on each concurrently. It runs fn
// inline when the work is too small to be worth a goroutine.
func Parallel(n, minChunk int, fn func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if minChunk < 1 {
		minChunk = 1
	}
	if max := n / minChunk; max < workers {
		workers = max
	}
	if workers <= 1 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		hi := lo + chunk
		if hi > n {
			hi = n
		}
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, hi)
	}
	wg.Wait()
}
