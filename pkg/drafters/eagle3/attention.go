package eagle3

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TTT is the attention of the draft unrolled over several steps for training
// (EAGLE-3's "training-time test"), over a batch of packed sequences (Seqs):
// the device's AttendTTT and AttendTTTBackward, which say what it computes.
// Step k's keys and values live in Keys[k] and Vals[k], where the layer's
// Acts of that step put them; Step says which step the next Attend or
// AttendBackward runs. It keeps every step's log-sum-exp for the backward
// pass, and its gradients of the keys and values until each step's is
// complete.
type TTT struct {
	// Seqs are the batch's sequences; Step the step to run.
	Seqs []tensor.Span
	Step int
	// Keys[k] and Vals[k] hold step k's RoPE'd keys and values, [R, nkv*hd]
	// (the step's Acts.K and Acts.V).
	Keys, Vals []tensor.Tensor

	dev          tensor.Device
	shape        tensor.AttnShape
	lse          []tensor.Tensor // per step [R, nq]
	dkeys, dvals []tensor.Tensor // per step [R, nkv*hd]
}

// NewTTT allocates on dev the attention of steps unrolled steps over batches
// of up to maxRows rows; withGrad adds what the backward pass needs. The
// device sizes its own scratch to the longest sequence it is given.
func NewTTT(g Geometry, dev tensor.Device, steps, maxRows int, withGrad bool) (*TTT, error) {
	kw := g.KVDim()
	t := &TTT{dev: dev, shape: tensor.AttnShape{Heads: g.Heads, KVHeads: g.KVHeads, HeadDim: g.HeadDim}}
	al := tensor.Allocator{Dev: dev}
	for range steps {
		t.Keys = append(t.Keys, al.F32(maxRows, kw))
		t.Vals = append(t.Vals, al.F32(maxRows, kw))
		t.lse = append(t.lse, al.F32(maxRows, g.Heads))
		if withGrad {
			t.dkeys = append(t.dkeys, al.F32(maxRows, kw))
			t.dvals = append(t.dvals, al.F32(maxRows, kw))
		}
	}
	if al.Err != nil {
		return nil, fmt.Errorf("eagle3: TTT attention buffers: %w", al.Err)
	}
	return t, nil
}

// Attend implements nn.Attender for step Step, whose keys and values the
// layer wrote into Keys[Step] and Vals[Step] (k and v).
func (t *TTT) Attend(dev tensor.Device, o, q, k, v tensor.Tensor) {
	s := t.Step
	dev.AttendTTT(o, t.lse[s], q, t.Keys[:s+1], t.Vals[:s+1], t.shape, t.Seqs)
}

// ZeroGrad clears the key and value gradients of rows rows before a
// backward pass through the unroll.
func (t *TTT) ZeroGrad(rows int) {
	for k := range t.dkeys {
		t.dev.Zero(t.dkeys[k].RowRange(0, rows))
		t.dev.Zero(t.dvals[k].RowRange(0, rows))
	}
}

// AttendBackward implements nn.AttenderGrad for step Step, the steps after it
// having run theirs: it accumulates the gradient of this step's queries into
// dq and of every step's keys and values up to this one, and returns this
// step's, which are then complete (the later steps added their share).
func (t *TTT) AttendBackward(dev tensor.Device, dq, do, o, q tensor.Tensor) (dk, dv tensor.Tensor) {
	s, rows := t.Step, q.Rows()
	dev.AttendTTTBackward(dq, t.dkeys[:s+1], t.dvals[:s+1], do, o, t.lse[s], q, t.Keys[:s+1], t.Vals[:s+1], t.shape, t.Seqs)
	return t.dkeys[s].RowRange(0, rows), t.dvals[s].RowRange(0, rows)
}
