package spec

import (
	"math"
	"slices"
	"sort"
	"testing"
)

// TestCalibratedChoicesIsBest: for accuracies falling with the rank, the
// tree holds exactly the n most probable paths of the full tree (brute
// force), is prefix-closed, and its expected length is the best of any n
// paths.
func TestCalibratedChoicesIsBest(t *testing.T) {
	acc := [][]float64{
		{0.8, 0.1, 0.05, 0.02},
		{0.6, 0.15, 0.1, 0.05},
		{0.5, 0.2, 0.1},
		{0.45, 0.2},
	}
	type scored struct {
		path []int
		p    float64
	}
	var all []scored
	var walk func(path []int, p float64)
	walk = func(path []int, p float64) {
		d := len(path)
		if d == len(acc) {
			return
		}
		for r, a := range acc[d] {
			q := append(slices.Clone(path), r)
			all = append(all, scored{q, p * a})
			walk(q, p*a)
		}
	}
	walk(nil, 1)
	sort.SliceStable(all, func(i, j int) bool { return all[i].p > all[j].p })
	for _, n := range []int{1, 2, 5, 13, 33, 63, len(all), len(all) + 10} {
		c, err := CalibratedChoices(acc, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		want := min(n, len(all))
		if len(c) != want {
			t.Fatalf("n=%d: %d paths, want %d", n, len(c), want)
		}
		best := 1.0
		for _, s := range all[:want] {
			best += s.p
		}
		if got := ExpectedTreeLength(c, acc); math.Abs(got-best) > 1e-12 {
			t.Fatalf("n=%d: expected length %.15f, the best %d paths give %.15f", n, got, want, best)
		}
		for i := 1; i < len(c); i++ {
			a, b := c[i-1], c[i]
			if len(a) > len(b) || (len(a) == len(b) && slices.Compare(a, b) >= 0) {
				t.Fatalf("n=%d: paths %v then %v are not by depth then lexicographic", n, a, b)
			}
		}
	}
}

// TestCalibratedChoicesEdges: zero accuracies are never taken, bad input is
// refused, and one head gives a chain of its ranks.
func TestCalibratedChoicesEdges(t *testing.T) {
	c, err := CalibratedChoices([][]float64{{0.5, 0.3, 0}, {0, 0}}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(c, Choices{{0}, {1}}, slices.Equal) {
		t.Fatalf("got %v, want [[0] [1]]", c)
	}
	for _, bad := range []struct {
		acc   [][]float64
		nodes int
	}{
		{[][]float64{{0.5}}, 0},
		{nil, 3},
		{[][]float64{{}}, 3},
		{[][]float64{{1.5}}, 3},
		{[][]float64{{math.NaN()}}, 3},
	} {
		if _, err := CalibratedChoices(bad.acc, bad.nodes); err == nil {
			t.Errorf("%v nodes %d: accepted", bad.acc, bad.nodes)
		} else {
			t.Log(err)
		}
	}
}
