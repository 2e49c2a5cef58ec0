package kvcache

import (
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// row returns a key or value row whose values name the layer, the row and
// the layout, so that a misplaced copy shows.
func row(kv, layer, r int, isV bool) []float32 {
	out := make([]float32, kv)
	for j := range out {
		out[j] = float32(1000*layer + 10*r + j)
		if isV {
			out[j] = -out[j]
		}
	}
	return out
}

// check compares layer l's row r in all three layouts with want row w.
func check(t *testing.T, c *Cache, l, r, w int) {
	t.Helper()
	kv := c.KVDim()
	k, v := row(kv, l, w, false), row(kv, l, w, true)
	for j := 0; j < kv; j++ {
		if c.KV().K(l)[r*kv+j] != k[j] || c.KV().V(l)[r*kv+j] != v[j] || c.KV().KT(l)[j*c.Cap()+r] != k[j] {
			t.Fatalf("layer %d row %d value %d: K %v V %v K^T %v, want row %d's %v %v", l, r, j, c.KV().K(l)[r*kv+j], c.KV().V(l)[r*kv+j], c.KV().KT(l)[j*c.Cap()+r], w, k[j], v[j])
		}
	}
}

// TestCommitTree writes a committed prefix and a pending tree, commits a
// path through it and checks that every layout of every layer holds the
// prefix and the path's rows in order.
func TestCommitTree(t *testing.T) {
	const L, kv = 2, 3
	c, err := New(cpu.New(nil), L, kv, 10)
	if err != nil {
		t.Fatal(err)
	}
	write := func(off, tag int) {
		for l := 0; l < L; l++ {
			c.Write(l, off, cpu.HostTensor(row(kv, l, tag, false), 1, kv), cpu.HostTensor(row(kv, l, tag, true), 1, kv))
		}
	}
	for i := 0; i < 3; i++ {
		write(i, i)
	}
	if err := c.Append(3); err != nil {
		t.Fatal(err)
	}
	// Tree: 0 and 1 children of the prefix, 2 under 1, 3 under 2.
	for i := 0; i < 4; i++ {
		write(i, 3+i)
	}
	if err := c.AddPending([]int{-1, -1, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if c.Pending() != 4 || c.Depth(3) != 2 || c.Parent(2) != 1 {
		t.Fatalf("pending %d, depth(3) %d, parent(2) %d", c.Pending(), c.Depth(3), c.Parent(2))
	}
	if err := c.Commit([]int{1, 3}); err == nil || !strings.Contains(err.Error(), "not a path from the root") {
		t.Fatalf("commit of a broken path: %v", err)
	}
	if err := c.Commit([]int{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 6 || c.Pending() != 0 {
		t.Fatalf("after commit: len %d, pending %d", c.Len(), c.Pending())
	}
	for l := 0; l < L; l++ {
		for r, w := range []int{0, 1, 2, 4, 5, 6} {
			check(t, c, l, r, w)
		}
	}
	if err := c.Truncate(7); err == nil {
		t.Fatal("truncate past the length succeeded")
	}
	if err := c.Truncate(2); err != nil || c.Len() != 2 {
		t.Fatalf("truncate: %v, len %d", err, c.Len())
	}
}

// TestCapacity checks the capacity and parent errors, and that a refused
// AddPending changes nothing.
func TestCapacity(t *testing.T) {
	if _, err := New(cpu.New(nil), 0, 4, 4); err == nil {
		t.Fatal("a cache of no layers")
	}
	if _, err := New(cpu.New(nil), 1, 4, -1); err == nil {
		t.Fatal("a negative capacity")
	}
	c, err := New(cpu.New(nil), 1, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Fits(5); err == nil || !strings.Contains(err.Error(), "cache capacity 4") {
		t.Fatalf("fits 5 of 4: %v", err)
	}
	if err := c.Append(3); err != nil {
		t.Fatal(err)
	}
	if err := c.AddPending([]int{-1, -1}); err == nil {
		t.Fatal("two pending nodes after 3 of 4 rows")
	}
	if err := c.AddPending([]int{0}); err == nil || !strings.Contains(err.Error(), "parent 0") {
		t.Fatalf("a node as its own parent: %v", err)
	}
	if c.Pending() != 0 {
		t.Fatalf("refused AddPending left %d pending", c.Pending())
	}
	if err := c.AddPending([]int{-1}); err != nil {
		t.Fatal(err)
	}
	c.Reset()
	if c.Len() != 0 || c.Pending() != 0 {
		t.Fatalf("reset: len %d pending %d", c.Len(), c.Pending())
	}
}
