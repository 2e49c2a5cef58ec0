package eagle3

import (
	"fmt"

	"github.com/drafter-ai/drafter/train/dataset"
)

// CountResponseTokens counts, over every sample of ds, how often each target id
// occurs at a loss-masked position (the response tokens), reading tokens and
// masks only. v is the target vocabulary size; an id outside [0, v) is an error
// naming the sample.
func CountResponseTokens(ds dataset.Dataset, v int) ([]int64, error) {
	counts := make([]int64, v)
	var s dataset.Sample
	for i := 0; i < ds.NumSamples(); i++ {
		if err := readTokens(ds, i, &s, v); err != nil {
			return nil, fmt.Errorf("eagle3: counting the draft vocabulary: %w", err)
		}
		countInto(counts, &s)
	}
	return counts, nil
}

// readTokens reads sample i's tokens and loss mask (no states) into s and
// checks them against the vocabulary size v.
func readTokens(ds dataset.Dataset, i int, s *dataset.Sample, v int) error {
	if err := ds.Sample(i, s, dataset.TokensOnly); err != nil {
		return fmt.Errorf("reading sample %d: %w", i, err)
	}
	return dataset.Check(i, s, dataset.TokensOnly, ds.Hidden(), v)
}

// countInto adds the loss-masked tokens of a checked sample to counts.
func countInto(counts []int64, s *dataset.Sample) {
	for j, t := range s.Tokens {
		if s.LossMask[j] {
			counts[t]++
		}
	}
}
