package medusa

import (
	"fmt"
	"math/rand/v2"

	"github.com/drafter-ai/drafter/train/dataset"
)

// sampleOrder returns a permutation of [0,n) for the given stream; each epoch
// draws its own from (seed, epoch), so a resumed run rebuilds it exactly.
func sampleOrder(n int, seed, stream uint64) []int {
	p := rand.New(rand.NewPCG(seed, stream)).Perm(n)
	return p
}

const heldOutStream = 0x6d656475 // "medu": the stream of the held-out split

// positions reads samples in order and packs their positions into batches.
type positions struct {
	data   dataset.Dataset
	heads  int
	hidden int
	vocab  int
	order  []int
	cursor int // next sample in order
	offset int // next position within it
	loaded int // order index of the sample in cur, -1 if none
	cur    dataset.Sample
	// When non-nil (evaluation), rowT and rowS receive each row's position in
	// its sample and the sample's index in order; capacity rows each.
	rowT, rowS []int32
}

// useful reports whether some head has a target at position t.
func useful(s *dataset.Sample, t, heads int) bool {
	for h := 0; h < heads; h++ {
		if j := t + h + 2; j < len(s.Tokens) && s.LossMask[j] {
			return true
		}
	}
	return false
}

// fill packs up to b capacity positions into b; it returns false at the end of
// the order.
func (p *positions) fill(b *Batch, capacity int) (bool, error) {
	b.Rows = 0
	H := p.hidden
	for b.Rows < capacity && p.cursor < len(p.order) {
		if p.loaded != p.cursor {
			i := p.order[p.cursor]
			if err := p.data.Sample(i, &p.cur, dataset.Final); err != nil {
				return false, fmt.Errorf("medusa: reading sample %d: %w", i, err)
			}
			if err := dataset.Check(i, &p.cur, dataset.Final, H, p.vocab); err != nil {
				return false, fmt.Errorf("medusa: %w", err)
			}
			p.loaded = p.cursor
		}
		s := &p.cur
		T := len(s.Tokens)
		for ; p.offset < T && b.Rows < capacity; p.offset++ {
			t := p.offset
			if !useful(s, t, p.heads) {
				continue
			}
			r := b.Rows
			if p.rowT != nil {
				p.rowT[r], p.rowS[r] = int32(t), int32(p.cursor)
			}
			copy(b.X[r*H:(r+1)*H], s.Final[t*H:(t+1)*H])
			for h := 0; h < p.heads; h++ {
				tg := int32(-1)
				if j := t + h + 2; j < T && s.LossMask[j] {
					tg = s.Tokens[j]
				}
				b.Targets[h][r] = tg
			}
			b.Rows++
		}
		if p.offset >= T {
			p.cursor++
			p.offset = 0
		}
	}
	return b.Rows > 0, nil
}

// countPositions returns the number of positions with at least one target in
// the listed samples, reading tokens and masks only.
func countPositions(data dataset.Dataset, idx []int, heads, hidden, vocab int) (int, error) {
	var s dataset.Sample
	total := 0
	for _, i := range idx {
		if err := data.Sample(i, &s, dataset.TokensOnly); err != nil {
			return 0, fmt.Errorf("medusa: reading sample %d: %w", i, err)
		}
		if err := dataset.Check(i, &s, dataset.TokensOnly, hidden, vocab); err != nil {
			return 0, fmt.Errorf("medusa: %w", err)
		}
		for t := range s.Tokens {
			if useful(&s, t, heads) {
				total++
			}
		}
	}
	return total, nil
}
