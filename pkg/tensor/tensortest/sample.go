package tensortest

import (
	"math"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// sampleRows checks SampleRows against tensor.SampleRow on rows of several
// widths (one column, fewer than a block's threads, several columns per
// thread) at temperatures from near 0 (exponentials that underflow) to 2.5,
// with -Inf entries, ties, rows with NaN, +Inf or only -Inf (id -1), and
// the uniforms 0 and the largest below 1 (the last token with mass). At
// temperature 0 the ids must be the reference's exactly; above, a device may
// round its sums differently (a GPU's trees), so a different id is accepted
// only as the neighbouring token with mass when u·total lies within 1e-6 of
// the total from the boundary between them (on the CPU, whose SampleRows is
// the reference, every id is equal). Once warm the op allocates nothing.
func sampleRows(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 41)
	for _, n := range []int{1, 37, 1000, 9000} {
		rows := 24
		v := e.rand(rows*n, 3)
		if n > 1 {
			for i := 0; i < n; i += 3 {
				v[2*n+i] = float32(math.Inf(-1)) // row 2: a third masked
			}
			v[3*n+n/2], v[3*n+n-1] = 50, 50 // row 3: a tie at the maximum
		}
		v[4*n+n-1] = float32(math.NaN()) // row 4: NaN
		v[5*n] = float32(math.Inf(1))    // row 5: +Inf
		for i := 0; i < n; i++ {
			v[6*n+i] = float32(math.Inf(-1)) // row 6: nothing to draw
		}
		x := e.tensor(v, rows, n)
		u := make([]float64, rows)
		for r := range u {
			u[r] = e.r.Float64()
		}
		u[7], u[8] = 0, math.Nextafter(1, 0)
		ids := make([]int32, rows)
		for _, temp := range []float64{0, 1e-3, 0.7, 1, 2.5} {
			dev.SampleRows(ids, x, temp, u)
			for r := 0; r < rows; r++ {
				row := v[r*n : r*n+n]
				want := tensor.SampleRow(row, temp, u[r])
				if r >= 4 && r <= 6 && want != -1 {
					t.Fatalf("the reference drew %d from the invalid row %d", want, r)
				}
				if ids[r] == want {
					continue
				}
				if temp == 0 || want < 0 || ids[r] < 0 || !nearBoundary(row, temp, u[r], want, ids[r]) {
					t.Fatalf("%d columns, temperature %g, row %d (u %v): id %d, want %d", n, temp, r, u[r], ids[r], want)
				}
				t.Logf("%d columns, temperature %g, row %d: id %d beside the reference's %d at a boundary", n, temp, r, ids[r], want)
			}
			if n > 1 && temp == 0 && ids[3] != int32(n/2) {
				t.Fatalf("a tie at the maximum: id %d, want the first, %d", ids[3], n/2)
			}
		}
		if n > 1 {
			if a := testing.AllocsPerRun(5, func() { dev.SampleRows(ids, x, 0.7, u) }); a != 0 {
				t.Fatalf("SampleRows allocates %v times per call", a)
			}
		}
	}
}

// nearBoundary reports whether tokens a and b are neighbours among the
// tokens with mass and u·total lies within 1e-6·total of the cumulative
// probability between them (the reference's rounding).
func nearBoundary(row []float32, temp, u float64, a, b int32) bool {
	if a > b {
		a, b = b, a
	}
	mx := float32(math.Inf(-1))
	for _, v := range row {
		mx = max(mx, v)
	}
	p := make([]float64, len(row))
	var sum, total float64
	for _, v := range row {
		if v >= -math.MaxFloat32 {
			sum += math.Exp((float64(v) - float64(mx)) / temp)
		}
	}
	for i, v := range row {
		if v >= -math.MaxFloat32 {
			p[i] = float64(float32(float64(float32(math.Exp((float64(v)-float64(mx))/temp))) / sum))
		}
		total += p[i]
	}
	var cum float64
	for i := 0; i <= int(a); i++ {
		cum += p[i]
	}
	for i := a + 1; i < b; i++ {
		if p[i] != 0 {
			return false // not neighbours
		}
	}
	return math.Abs(u*total-cum) <= 1e-6*total
}
