package tensortest

import (
	"fmt"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The checks of AddScaledRows, a mixture-of-experts layer's combine, against
// its definition written here in float32: for i in order, dst[rows[i]] =
// dst[rows[i]] + float32(scale[i]·src[i]), the product rounded before the
// sum. Every device must give exactly these bits (no fused multiply-add, a
// repeated row's additions in index order), so the comparisons are exact.

// addScaledRowsRef applies AddScaledRows' definition to the host copy dst
// [*, cols].
func addScaledRowsRef(dst, src []float32, rows []int32, scale []float32, cols int) {
	for i, r := range rows {
		d := dst[int(r)*cols : int(r+1)*cols]
		x := src[i*cols : (i+1)*cols]
		for c, v := range x {
			p := float32(scale[i] * v) // rounded: no fused multiply-add
			d[c] = d[c] + p
		}
	}
}

// addScaledRowsCase is one call: dst of R rows, n indices (distinct in a
// random order, increasing, or drawn with repeats), src with extra rows
// beyond the n it adds.
type addScaledRowsCase struct {
	R, n, cols, extra int
	order             string // "shuffled", "increasing" or "repeated"
}

// indices returns the case's row indices.
func (e *env) indices(c addScaledRowsCase) []int32 {
	rows := make([]int32, c.n)
	switch c.order {
	case "repeated":
		for i := range rows {
			rows[i] = int32(e.r.IntN(c.R))
		}
		if c.n >= 3 { // a repeat for certain, the last row three times at once
			rows[0], rows[1], rows[2] = int32(c.R-1), int32(c.R-1), int32(c.R-1)
		}
	case "increasing":
		for i, r := range e.r.Perm(c.R)[:c.n] {
			rows[i] = int32(r)
		}
		for i := 1; i < len(rows); i++ { // insertion sort: small n
			for j := i; j > 0 && rows[j] < rows[j-1]; j-- {
				rows[j], rows[j-1] = rows[j-1], rows[j]
			}
		}
	default:
		for i, r := range e.r.Perm(c.R)[:c.n] {
			rows[i] = int32(r)
		}
	}
	return rows
}

// addScaledRows checks AddScaledRows bit for bit against addScaledRowsRef:
// rows out of order, increasing and repeated, an empty call, wide rows
// (1000+ columns, split over the CPU's workers), many rows (1000+ indices,
// distinct and repeated), and a src longer than the call's rows; then that
// each programming error panics.
func addScaledRows(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 40)
	for _, c := range []addScaledRowsCase{
		{R: 20, n: 13, cols: 37, order: "shuffled"},
		{R: 20, n: 13, cols: 37, order: "increasing"},
		{R: 7, n: 50, cols: 65, order: "repeated"},
		{R: 9, n: 40, cols: 1031, extra: 3, order: "repeated"},
		{R: 60, n: 50, cols: 1031, order: "shuffled"},
		{R: 1500, n: 1200, cols: 24, order: "shuffled"},
		{R: 1500, n: 1100, cols: 19, order: "increasing"},
		{R: 64, n: 1100, cols: 40, extra: 1, order: "repeated"},
		{R: 1, n: 1001, cols: 5, order: "repeated"},
		{R: 4, n: 0, cols: 6},
	} {
		name := fmt.Sprintf("AddScaledRows of %d %s rows of %d into %d", c.n, c.order, c.cols, c.R)
		rows := e.indices(c)
		dv, sv, scale := e.rand(c.R*c.cols, 2), e.rand((c.n+c.extra)*c.cols, 1), e.rand(c.n, 0.5)
		dst, src := e.tensor(dv, c.R, c.cols), e.tensor(sv, c.n+c.extra, c.cols)
		if c.n+c.extra == 0 {
			src = tensor.Tensor{}
		}
		dev.AddScaledRows(dst, src, rows, scale)
		want := append([]float32(nil), dv...)
		addScaledRowsRef(want, sv, rows, scale, c.cols)
		e.same(name, e.read(dst), want)
		if c.n == 0 { // an empty view of a real src is a no-op too
			dev.AddScaledRows(dst, e.tensor(sv, 1, c.cols).RowRange(0, 0), nil, nil)
			e.same(name+" from an empty view", e.read(dst), want)
		}
	}

	// A repeated row gets its additions in index order: 2^24, then 1 twice
	// (each rounds away: 2^24+1 is a tie, to even), then -2^24 leave 0,
	// where adding the ones together first or last would leave 2 or 1.
	dst := e.tensor([]float32{0}, 1, 1)
	dev.AddScaledRows(dst, e.tensor([]float32{1 << 24, 1, 1, -(1 << 24)}, 4, 1), []int32{0, 0, 0, 0}, []float32{1, 1, 1, 1})
	e.same("AddScaledRows in index order", e.read(dst), []float32{0})

	e.addScaledRowsPanics()
}

// addScaledRowsPanics checks that each programming error AddScaledRows
// rejects panics: a dtype other than F32, columns that differ, a scale count
// or a src too short for the rows, a row index out of range either side.
func (e *env) addScaledRowsPanics() {
	dst := e.tensor(e.rand(4*3, 1), 4, 3)
	src := e.tensor(e.rand(2*3, 1), 2, 3)
	wide := e.tensor(e.rand(2*4, 1), 2, 4)
	ints, err := e.dev.Alloc(tensor.I32, 2, 3)
	if err != nil {
		e.t.Fatal(err)
	}
	one := []float32{1, 2}
	for _, c := range []struct {
		what     string
		dst, src tensor.Tensor
		rows     []int32
		scale    []float32
	}{
		{"an I32 src", dst, ints, []int32{0, 1}, one},
		{"an I32 dst", ints, src, []int32{0, 1}, one},
		{"columns that differ", dst, wide, []int32{0, 1}, one},
		{"fewer scales than rows", dst, src, []int32{0, 1}, one[:1]},
		{"more scales than rows", dst, src, []int32{0}, one},
		{"more rows than src has", dst, src, []int32{0, 1, 2}, []float32{1, 2, 3}},
		{"a row past dst", dst, src, []int32{0, 4}, one},
		{"a negative row", dst, src, []int32{-1, 0}, one},
	} {
		func() {
			defer func() {
				if recover() == nil {
					e.t.Fatalf("AddScaledRows with %s did not panic", c.what)
				}
			}()
			e.dev.AddScaledRows(c.dst, c.src, c.rows, c.scale)
		}()
	}
}

// addScaledRowsAllocs checks that AddScaledRows allocates nothing per call
// once warm, with increasing, shuffled and repeated rows, small and split
// over the CPU's workers.
func addScaledRowsAllocs(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 41)
	type call struct {
		dst, src tensor.Tensor
		rows     []int32
		scale    []float32
	}
	var calls []call
	for _, c := range []addScaledRowsCase{
		{R: 30, n: 10, cols: 16, order: "increasing"},
		{R: 30, n: 10, cols: 16, order: "shuffled"},
		{R: 30, n: 40, cols: 16, order: "repeated"},
		{R: 200, n: 150, cols: 300, order: "repeated"},
	} {
		calls = append(calls, call{e.tensor(e.rand(c.R*c.cols, 1), c.R, c.cols), e.tensor(e.rand(c.n*c.cols, 1), c.n, c.cols),
			e.indices(c), e.rand(c.n, 0.1)})
	}
	run := func() {
		for _, c := range calls {
			dev.AddScaledRows(c.dst, c.src, c.rows, c.scale)
		}
	}
	run() // grow the scratch
	if a := testing.AllocsPerRun(5, run); a != 0 {
		t.Fatalf("%v allocations per run of AddScaledRows, want 0", a)
	}
}
