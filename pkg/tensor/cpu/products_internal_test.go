package cpu

import (
	"testing"
)

// fixedThreads is a backend saying how many threads each of its calls uses.
type fixedThreads struct {
	Backend
	n int
}

func (f fixedThreads) Threads() int { return f.n }

// TestThreading: Products decides from the backend's type, never its name,
// how to thread: the pure-Go backend's calls run side by side and split
// themselves; a backend of one thread a call is split by Products; any other
// (several threads, or none said) is called whole, one call at a time.
func TestThreading(t *testing.T) {
	named := func(name string) Backend { return namedBackend{goBLAS{}, name} }
	for _, c := range []struct {
		be                  Backend
		parallel, selfSplit bool
	}{
		{PureGo(), true, true},
		{fixedThreads{PureGo(), 1}, true, false},
		{fixedThreads{PureGo(), 4}, false, false},
		{named("go"), false, false},
		{named("openblas"), false, false},
	} {
		p := NewProducts(c.be)
		if p.ParallelCalls() != c.parallel || p.selfSplit != c.selfSplit || p.Backend() != c.be {
			t.Errorf("%T (%s): parallel %v, self-split %v; want %v, %v", c.be, c.be.Name(), p.ParallelCalls(), p.selfSplit, c.parallel, c.selfSplit)
		}
	}
	if o, err := OpenBLAS(); err == nil {
		if p := NewProducts(o); !p.ParallelCalls() || p.selfSplit {
			t.Error("OpenBLAS (one thread a call): products not split by Products")
		}
	}
}

// namedBackend is a backend under another name: the name decides nothing.
type namedBackend struct {
	Backend
	name string
}

func (n namedBackend) Name() string { return n.name }
