// Package kvcache holds one sequence's attention key/value cache, the one
// type the target model (pkg/model) and the EAGLE-3 draft session
// (pkg/drafters/eagle3) keep their keys and values in.
//
// A Cache keeps, for every layer, the keys and values of rows [0, Cap) in a
// device's memory (a tensor.KV, in the layout the device's attention reads),
// and the bookkeeping of which rows hold what. Rows [0, Len) are the
// committed context.
// A pass writes its new rows after them (Write); a chain of them is
// committed at once (Append), the nodes of a speculation tree stay pending,
// each with its parent, at rows Len()+i, until Commit keeps an accepted path
// or Truncate, Reset or ClearPending drops them. The cache does no
// arithmetic: the device's attention reads the rows it needs.
package kvcache

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Cache is one sequence's keys and values for every layer, with its
// committed length and its pending tree nodes. It is not safe for
// concurrent writes; attentions may read it from several goroutines.
type Cache struct {
	dev     tensor.Device
	kv      *tensor.KV
	n       int     // committed rows
	parents []int32 // per pending node (row n+i): its parent node, or -1
	depths  []int32 // per pending node: its ancestors among the pending nodes
}

// New allocates on dev a cache of layers layers, kvDim values per key or
// value row and capacity rows.
func New(dev tensor.Device, layers, kvDim, capacity int) (*Cache, error) {
	kv, err := dev.NewKV(layers, kvDim, capacity)
	if err != nil {
		return nil, fmt.Errorf("kvcache: %w", err)
	}
	return &Cache{dev: dev, kv: kv}, nil
}

// Len returns the number of committed rows.
func (c *Cache) Len() int { return c.n }

// Cap returns the capacity in rows, committed and pending together.
func (c *Cache) Cap() int { return c.kv.Cap() }

// KVDim returns the values in one layer's key (or value) row.
func (c *Cache) KVDim() int { return c.kv.KVDim() }

// Pending returns the number of pending tree nodes, at rows Len()..Len()+Pending()-1.
func (c *Cache) Pending() int { return len(c.parents) }

// Parent returns pending node i's parent node, or -1 for a child of the
// committed rows.
func (c *Cache) Parent(i int) int { return int(c.parents[i]) }

// Depth returns how many ancestors pending node i has among the pending
// nodes (0 for a child of the committed rows).
func (c *Cache) Depth(i int) int { return int(c.depths[i]) }

// KV returns the cache's memory, for the device's Attend.
func (c *Cache) KV() *tensor.KV { return c.kv }

// Fits reports an error unless t more rows fit after the committed ones.
func (c *Cache) Fits(t int) error {
	if t < 0 || c.n+t > c.kv.Cap() {
		return fmt.Errorf("kvcache: %d rows after %d exceed the cache capacity %d", t, c.n, c.kv.Cap())
	}
	return nil
}

// Write stores the rows of keys k and values v ([r, KVDim] tensors of the
// cache's device) in layer l at rows Len()+off on. The caller
// has checked that they fit (Fits). Writing neither commits the rows nor
// makes them pending: Append or AddPending does.
func (c *Cache) Write(l, off int, k, v tensor.Tensor) {
	c.dev.KVWrite(c.kv, l, c.n+off, k, v)
}

// Append commits the t rows written after the committed ones (a chain). It
// drops the pending nodes, whose rows the chain has taken.
func (c *Cache) Append(t int) error {
	if err := c.Fits(t); err != nil {
		return fmt.Errorf("kvcache: append: %w", err)
	}
	c.n += t
	c.ClearPending()
	return nil
}

// AddPending makes the next len(parents) rows after the pending ones
// pending tree nodes: node Pending()+i continues parents[i], an earlier
// pending node or -1 (the committed rows). It checks the parents and the
// capacity first and changes nothing when they fail; it allocates nothing
// once the cache has held as many pending nodes.
func (c *Cache) AddPending(parents []int) error {
	base := len(c.parents)
	if err := c.Fits(base + len(parents)); err != nil {
		return fmt.Errorf("kvcache: %d tree nodes after %d pending: %w", len(parents), base, err)
	}
	for i, p := range parents {
		if p < -1 || p >= base+i {
			return fmt.Errorf("kvcache: tree node %d has parent %d; want -1 or an earlier node", base+i, p)
		}
	}
	for _, p := range parents {
		d := int32(0)
		if p >= 0 {
			d = c.depths[p] + 1
		}
		c.parents = append(c.parents, int32(p))
		c.depths = append(c.depths, d)
	}
	return nil
}

// DropPending keeps the first n pending nodes (n <= Pending()) and drops
// the others, for example the nodes of a pass that failed.
func (c *Cache) DropPending(n int) {
	if n < len(c.parents) {
		c.parents = c.parents[:n]
		c.depths = c.depths[:n]
	}
}

// ClearPending drops every pending node.
func (c *Cache) ClearPending() { c.DropPending(0) }

// Reset empties the cache for reuse, keeping its memory.
func (c *Cache) Reset() {
	c.n = 0
	c.ClearPending()
}

// Truncate drops the committed rows from n on (n <= Len()) and every
// pending node.
func (c *Cache) Truncate(n int) error {
	if n < 0 || n > c.n {
		return fmt.Errorf("kvcache: cannot truncate a cache of length %d to %d", c.n, n)
	}
	c.n = n
	c.ClearPending()
	return nil
}

// Commit keeps the accepted path of the pending tree: accepted lists pending
// node indices forming a chain from a root: accepted[0] has parent -1 and
// accepted[j] has parent accepted[j-1]. Their rows are moved into place
// after the committed ones, in every layer and layout, and the cache grows
// by len(accepted); every other pending node is dropped. An empty accepted
// drops all pending nodes. It checks the path first and changes nothing
// when it is not one.
func (c *Cache) Commit(accepted []int) error {
	np := len(c.parents)
	prev := -1
	for j, a := range accepted {
		if a < 0 || a >= np {
			return fmt.Errorf("kvcache: commit: accepted node %d (position %d in the list) is not one of the %d pending tree nodes", a, j, np)
		}
		if int(c.parents[a]) != prev {
			return fmt.Errorf("kvcache: commit: accepted nodes are not a path from the root: node %d has parent %d, want %d", a, c.parents[a], prev)
		}
		prev = a
	}
	for j, a := range accepted {
		if a != j { // else already in place (always so for a chain)
			c.dev.KVMove(c.kv, c.n+j, c.n+a)
		}
	}
	c.n += len(accepted)
	c.ClearPending()
	return nil
}
