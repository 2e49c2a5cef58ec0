package eagle3

import (
	"fmt"
	"sort"
)

// DefaultDraftVocab is the draft vocabulary size EAGLE-3 and SpecForge use.
const DefaultDraftVocab = 32000

// Vocab is the draft vocabulary: the N target token ids the draft layer's own
// lm_head scores, and the two mapping tensors the engines load.
//
// IDs are ascending; D2T[i] = IDs[i] - i is the offset the engines add to a
// draft index to get the target id; T2D[j] says whether target id j is in the
// set; Index[j] is j's draft index, or -1.
type Vocab struct {
	IDs   []int32
	D2T   []int64
	T2D   []bool
	Index []int32
	// Seen is how many of IDs occurred at least once in the counted tokens; the
	// rest are padding.
	Seen int
}

// BuildVocab picks the n most frequent ids of counts (counts[j] = occurrences of
// target id j among the loss-masked tokens; len(counts) = V). Ties in frequency
// go to the lower id. When fewer than n ids occur, the set is padded with the
// lowest unseen ids (ties at count zero, so the same rule applies); this keeps
// the choice deterministic and independent of anything but the counts. n is
// capped at V. The chosen ids are sorted ascending.
func BuildVocab(counts []int64, n int) (*Vocab, error) {
	v := len(counts)
	if v == 0 {
		return nil, fmt.Errorf("eagle3: draft vocabulary: the target vocabulary is empty")
	}
	if n <= 0 {
		return nil, fmt.Errorf("eagle3: draft vocabulary size must be positive, got %d", n)
	}
	if n > v {
		n = v
	}
	order := make([]int32, v)
	for i := range order {
		order[i] = int32(i)
	}
	sort.Slice(order, func(a, b int) bool {
		ca, cb := counts[order[a]], counts[order[b]]
		if ca != cb {
			return ca > cb
		}
		return order[a] < order[b]
	})
	ids := append([]int32(nil), order[:n]...)
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	voc := newVocab(ids, v)
	for _, id := range ids {
		if counts[id] > 0 {
			voc.Seen++
		}
	}
	return voc, nil
}

// newVocab derives the mapping tensors from ascending ids over a target
// vocabulary of size v.
func newVocab(ids []int32, v int) *Vocab {
	voc := &Vocab{IDs: ids, D2T: make([]int64, len(ids)), T2D: make([]bool, v), Index: make([]int32, v)}
	for j := range voc.Index {
		voc.Index[j] = -1
	}
	for i, id := range ids {
		voc.D2T[i] = int64(id) - int64(i)
		voc.T2D[id] = true
		voc.Index[id] = int32(i)
	}
	return voc
}

// VocabFromD2T rebuilds a Vocab from exported offsets, checking that the ids
// are strictly ascending and inside a target vocabulary of size v.
func VocabFromD2T(d2t []int64, v int) (*Vocab, error) {
	ids := make([]int32, len(d2t))
	for i, off := range d2t {
		id := int64(i) + off
		if id < 0 || id >= int64(v) {
			return nil, fmt.Errorf("eagle3: d2t[%d] = %d maps to target id %d, outside the target vocabulary [0, %d)", i, off, id, v)
		}
		if i > 0 && int32(id) <= ids[i-1] {
			return nil, fmt.Errorf("eagle3: d2t[%d] maps to target id %d, not above the previous id %d (ids must be strictly ascending)", i, id, ids[i-1])
		}
		ids[i] = int32(id)
	}
	voc := newVocab(ids, v)
	voc.Seen = len(ids)
	return voc, nil
}
