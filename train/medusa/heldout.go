package medusa

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/spec"
	"github.com/drafter-ai/drafter/train/dataset"
)

// evaluator holds the buffers of the held-out evaluation.
type evaluator struct {
	rowT, rowS []int32 // per batch row: position and sample (index in the held-out order)
	lead       []int32 // per position of the sample being walked: leading heads right
	sample     dataset.Sample
	// walk totals of the current evaluation
	walked, steps int
}

// newEvaluator allocates an evaluator for batches of up to rows positions.
func newEvaluator(rows int) *evaluator {
	return &evaluator{rowT: make([]int32, rows), rowS: make([]int32, rows)}
}

// walk adds sample i's greedy chain walk (see Metrics.Chain) to the totals:
// from each position t whose next token is a response token it takes
// 1+lead[t] tokens (lead never runs past the response: a head without a
// target ends it).
func (e *evaluator) walk(data dataset.Dataset, i int) error {
	if err := data.Sample(i, &e.sample, dataset.TokensOnly); err != nil {
		return fmt.Errorf("medusa: reading sample %d: %w", i, err)
	}
	mask := e.sample.LossMask
	T := len(mask)
	lead := e.lead[:T]
	for t := 0; t < T-1; {
		if !mask[t+1] {
			t++
			continue
		}
		a := 1 + int(lead[t])
		e.steps++
		e.walked += a
		t += a
	}
	return nil
}

// startSample resets the per-position leads for a sample of T tokens.
func (e *evaluator) startSample(T int) {
	if cap(e.lead) < T {
		e.lead = make([]int32, T)
	}
	clear(e.lead[:T])
}

// evaluate runs the heads over every position of the held-out samples idx.
func (e *evaluator) evaluate(ws *Workspace, b *Batch, data dataset.Dataset, idx []int, heads, H, vocab int, w []float64, step, epoch int) (*Metrics, error) {
	mt := &Metrics{Step: step, Epoch: epoch, HeadLoss: make([]float64, heads), Top1: make([]float64, heads), Top5: make([]float64, heads), Tokens: make([]int, heads),
		RankAccuracy: make([][]float64, heads)}
	t1, t5 := make([]int, heads), make([]int, heads)
	ranks := make([][]int, heads)
	for h := range ranks {
		ranks[h] = make([]int, RankBins)
	}
	if ws.useLK {
		mt.Alpha = make([]float64, heads)
	}
	p := &positions{data: data, heads: heads, hidden: H, vocab: vocab, order: idx, loaded: -1, rowT: e.rowT, rowS: e.rowS}
	e.walked, e.steps = 0, 0
	// Rows arrive in held-out order; sample k collects leads until a row of a
	// later sample shows up, then it is walked.
	k := 0
	if len(idx) > 0 {
		if err := data.Sample(idx[0], &e.sample, dataset.TokensOnly); err != nil {
			return nil, fmt.Errorf("medusa: reading sample %d: %w", idx[0], err)
		}
		e.startSample(len(e.sample.Tokens))
	}
	next := func() error {
		if err := e.walk(data, idx[k]); err != nil {
			return err
		}
		k++
		if k < len(idx) {
			if err := data.Sample(idx[k], &e.sample, dataset.TokensOnly); err != nil {
				return fmt.Errorf("medusa: reading sample %d: %w", idx[k], err)
			}
			e.startSample(len(e.sample.Tokens))
		}
		return nil
	}
	for {
		ok, err := p.fill(b, ws.MaxRows)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		ws.Evaluate(b)
		leads := ws.Leads(b.Rows)
		for r, l := range leads {
			for int(e.rowS[r]) > k {
				if err := next(); err != nil {
					return nil, err
				}
			}
			e.lead[e.rowT[r]] = l
		}
		rows, ce, top1, top5 := ws.Stats()
		for h := 0; h < heads; h++ {
			mt.Tokens[h] += rows[h]
			mt.HeadLoss[h] += ce[h]
			if mt.Alpha != nil {
				mt.Alpha[h] += ws.Alpha()[h] * float64(rows[h])
			}
			t1[h] += top1[h]
			t5[h] += top5[h]
			for r, n := range ws.RankCounts()[h] {
				ranks[h][r] += n
			}
		}
	}
	for h := 0; h < heads; h++ {
		if mt.Tokens[h] > 0 {
			k := float64(mt.Tokens[h])
			mt.HeadLoss[h] /= k
			if mt.Alpha != nil {
				mt.Alpha[h] /= k
			}
			mt.Top1[h], mt.Top5[h] = float64(t1[h])/k, float64(t5[h])/k
			mt.RankAccuracy[h] = make([]float64, RankBins)
			for r, n := range ranks[h] {
				mt.RankAccuracy[h][r] = float64(n) / k
			}
		}
		mt.Loss += w[h] * mt.HeadLoss[h]
	}
	for k < len(idx) {
		if err := next(); err != nil {
			return nil, err
		}
	}
	// A greedy chain of the heads yields, per target step, the expected
	// chain length with head j's top-1 right with probability Top1[j].
	mt.Acceptance = spec.ExpectedChainLength(mt.Top1)
	mt.ChainSteps = e.steps
	if e.steps > 0 {
		mt.Chain = float64(e.walked) / float64(e.steps)
	}
	return mt, nil
}
