package eagle3

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// attnShape is the head layout of the draft attention.
type attnShape struct {
	nq, nkv, hd int
	scale       float32 // 1/sqrt(hd)
}

func newAttnShape(g Geometry) attnShape {
	return attnShape{nq: g.Heads, nkv: g.KVHeads, hd: g.HeadDim, scale: float32(1 / math.Sqrt(float64(g.HeadDim)))}
}

// TTT is the attention of the draft unrolled over several steps for training
// (EAGLE-3's "training-time test"), over a batch of packed sequences (Seqs):
// the device's AttendTTT and AttendTTTBackward, which say what it computes.
// Step k's keys and values live in Keys[k] and Vals[k], where the layer's
// Acts of that step put them; Step says which step the next Attend or
// AttendBackward runs. It keeps every step's log-sum-exp for the backward
// pass, and its gradients of the keys and values until each step's is
// complete.
//
// The layer still computes on host slices, which TTT hands to the device as
// tensor.HostTensor views, so the device's memory must be the host's (the
// CPU device); NewTTT refuses any other.
type TTT struct {
	// Seqs are the batch's sequences; Step the step to run.
	Seqs []tensor.Span
	Step int
	// Keys[k] and Vals[k] hold step k's RoPE'd keys and values, [R, nkv*hd]
	// (HostF32 gives the layer their values to write).
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
	// add appends a [maxRows, cols] buffer to dst, or keeps the first error.
	var err error
	add := func(dst *[]tensor.Tensor, cols int) {
		if err != nil {
			return
		}
		var x tensor.Tensor
		if x, err = dev.Alloc(tensor.F32, maxRows, cols); err != nil {
			err = fmt.Errorf("eagle3: TTT attention buffers: %w", err)
			return
		}
		if _, ok := dev.HostF32(x); !ok {
			err = fmt.Errorf("eagle3: TTT attention needs a device whose memory is the host's, not %s", dev.Name())
			return
		}
		*dst = append(*dst, x)
	}
	for range steps {
		add(&t.Keys, kw)
		add(&t.Vals, kw)
		add(&t.lse, g.Heads)
		if withGrad {
			add(&t.dkeys, kw)
			add(&t.dvals, kw)
		}
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// host returns x's values, which NewTTT made sure the device keeps in host
// memory.
func (t *TTT) host(x tensor.Tensor) []float32 {
	v, _ := t.dev.HostF32(x)
	return v
}

// Attend implements Attention for step Step, whose keys and values the
// layer wrote into Keys[Step] and Vals[Step] (k and v).
func (t *TTT) Attend(o, q, k, v []float32, rows int) {
	s, qw := t.Step, t.shape.Heads*t.shape.HeadDim
	t.dev.AttendTTT(tensor.HostTensor(o, rows, qw), t.lse[s], tensor.HostTensor(q, rows, qw), t.Keys[:s+1], t.Vals[:s+1], t.shape, t.Seqs)
}

// ZeroGrad clears the key and value gradients of rows rows before a
// backward pass through the unroll.
func (t *TTT) ZeroGrad(rows int) {
	for k := range t.dkeys {
		t.dev.Zero(t.dkeys[k].RowRange(0, rows))
		t.dev.Zero(t.dvals[k].RowRange(0, rows))
	}
}

// AttendBackward implements AttentionGrad for step Step, the steps after it
// having run theirs: it accumulates the gradient of this step's queries into
// dq and of every step's keys and values up to this one, and returns this
// step's, which are then complete (the later steps added their share).
func (t *TTT) AttendBackward(dq, do, o, q []float32, rows int) (dk, dv []float32) {
	s, qw := t.Step, t.shape.Heads*t.shape.HeadDim
	t.dev.AttendTTTBackward(tensor.HostTensor(dq, rows, qw), t.dkeys[:s+1], t.dvals[:s+1],
		tensor.HostTensor(do, rows, qw), tensor.HostTensor(o, rows, qw), t.lse[s], tensor.HostTensor(q, rows, qw),
		t.Keys[:s+1], t.Vals[:s+1], t.shape, t.Seqs)
	return t.host(t.dkeys[s]), t.host(t.dvals[s])
}
