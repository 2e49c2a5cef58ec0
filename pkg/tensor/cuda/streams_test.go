package cuda

import (
	"slices"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestStateCopy: the two buffers of a state copy hold what their sources
// held when started, although the sources are overwritten at once (the
// staging copy) and the other buffer is started in between; a pass of more
// rows grows a buffer; once grown, a Start and Wait allocate nothing on the
// Go heap; starting a buffer in flight, or waiting on an idle one, panics.
// On the stand-in every copy on the second stream is checked to be ordered
// by its events (an unordered one fails with CUDA_ERROR_ILLEGAL_STATE).
func TestStateCopy(t *testing.T) {
	d := openTest(t)
	const cols = 6
	c, err := d.NewStateCopy(2, cols)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srcs := make([]tensor.Tensor, 2)
	for i := range srcs {
		if srcs[i], err = d.Alloc(tensor.F32, 8, cols); err != nil {
			t.Fatal(err)
		}
	}
	values := func(step, part, rows int) []float32 {
		v := make([]float32, rows*cols)
		for i := range v {
			v[i] = float32(1000*step + 100*part + i)
		}
		return v
	}
	view := func(rows int) []tensor.Tensor {
		return []tensor.Tensor{srcs[0].RowRange(0, rows), srcs[1].RowRange(0, rows)}
	}
	rowsOf := []int{2, 3, 8, 1, 5, 8}
	for step, rows := range rowsOf {
		b := step % 2
		if step >= 2 {
			checkParts(t, c.Wait(b), step-2, rowsOf[step-2], values)
		}
		for p := range srcs {
			d.Write(srcs[p].RowRange(0, rows), values(step, p, rows))
		}
		c.Start(b, view(rows))
		for p := range srcs { // the next pass overwrites the sources at once
			d.Write(srcs[p], make([]float32, 8*cols))
		}
	}
	n := len(rowsOf)
	checkParts(t, c.Wait(n%2), n-2, rowsOf[n-2], values)
	checkParts(t, c.Wait((n+1)%2), n-1, rowsOf[n-1], values)
	four := view(4)
	if a := testing.AllocsPerRun(10, func() { c.Start(0, four); c.Wait(0) }); a != 0 {
		t.Errorf("a Start and Wait allocate %v times", a)
	}
	mustPanic(t, "a second Start", func() { c.Start(1, view(2)); c.Start(1, view(2)) })
	c.Wait(1)
	mustPanic(t, "a Wait without Start", func() { c.Wait(1) })
}

func checkParts(t *testing.T, got [][]float32, step, rows int, values func(step, part, rows int) []float32) {
	t.Helper()
	for p := range got {
		if want := values(step, p, rows); !slices.Equal(got[p], want) {
			t.Fatalf("pass %d part %d: the host buffer holds %v, want %v", step, p, got[p], want)
		}
	}
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s did not panic", what)
		}
	}()
	f()
}
