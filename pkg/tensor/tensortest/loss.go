package tensortest

import (
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// losses checks Softmax, the cross-entropies, the LK losses, TopK and Cast.
func losses(t *testing.T, dev tensor.Device) {
	t.Run("Softmax", func(t *testing.T) { softmax(t, dev) })
	t.Run("selection", func(t *testing.T) { selection(t, dev) })
	t.Run("SampleRows", func(t *testing.T) { sampleRows(t, dev) })
	t.Run("CrossEntropy", func(t *testing.T) { crossEntropy(t, dev) })
	t.Run("SoftCrossEntropy", func(t *testing.T) { softCrossEntropy(t, dev) })
	t.Run("LKLoss", func(t *testing.T) { lkLoss(t, dev) })
	t.Run("CrossEntropyEval", func(t *testing.T) { crossEntropyEval(t, dev) })
	t.Run("TopK", func(t *testing.T) { topK(t, dev) })
	t.Run("Cast", func(t *testing.T) { cast(t, dev) })
}

// logSoftmax returns log(softmax(x)) in float64.
func logSoftmax(x []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - m - math.Log(s)
	}
	return out
}

// i32 returns a new I32 tensor of dev holding v, one value per row.
func (e *env) i32(v []int32) tensor.Tensor {
	e.t.Helper()
	x, err := e.dev.Alloc(tensor.I32, len(v), 1)
	if err != nil {
		e.t.Fatal(err)
	}
	e.dev.WriteI32(x, v)
	return x
}

// closeTo fails unless got is within rel·max(1, |want|) of want.
func (e *env) closeTo(what string, got, want, rel float64) {
	e.t.Helper()
	if d := math.Abs(got - want); !(d <= rel*math.Max(1, math.Abs(want))) {
		e.t.Fatalf("%s: %.12g, want %.12g (difference %.3g)", what, got, want, d)
	}
}

// gradTol is the absolute tolerance of a loss gradient (probabilities
// within [-1, 1]) as a scale for near: 2e-5·0.05 = 1e-6.
func gradTol(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = 0.05
	}
	return s
}

func softmax(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 20)
	for _, sh := range [][2]int{{4, 9}, {300, 70}} { // the second split over the workers
		for _, scale := range []float32{1, 1 / 0.7} {
			rows, n := sh[0], sh[1]
			v := e.rand(rows*n, 3)
			v[n+2] = float32(math.Inf(-1)) // a masked value: probability 0
			x := e.tensor(v, rows, n)
			dev.Softmax(x, scale)
			want := make([]float64, rows*n)
			scaled := make([]float32, n)
			for r := 0; r < rows; r++ {
				for i, y := range v[r*n : r*n+n] {
					scaled[i] = float32(float64(y) * float64(scale))
				}
				for i, l := range logSoftmax(scaled) {
					want[r*n+i] = math.Exp(l)
				}
			}
			got := e.read(x)
			if got[n+2] != 0 {
				t.Fatalf("Softmax of -Inf is %v, want 0", got[n+2])
			}
			e.near("Softmax", got, want, gradTol(len(want)))
		}
	}
}

// selection checks ArgMax (first of equal largest values) and GatherCols.
func selection(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 27)
	rows, n := 300, 40 // split over the workers
	v := e.rand(rows*n, 1)
	v[5*n+7], v[5*n+30] = 9, 9 // a tie: the lower column wins
	x := e.tensor(v, rows, n)
	idx := make([]int32, rows)
	dev.ArgMax(idx, x)
	for r := 0; r < rows; r++ {
		best := 0
		for i, y := range v[r*n : r*n+n] {
			if y > v[r*n+best] {
				best = i
			}
		}
		if int(idx[r]) != best {
			t.Fatalf("ArgMax row %d: %d, want %d", r, idx[r], best)
		}
	}
	if idx[5] != 7 {
		t.Fatalf("ArgMax of a tie: column %d, want the first, 7", idx[5])
	}
	cols := []int32{39, 0, 7, 7, 12}
	ct, err := dev.Alloc(tensor.I32, 1, len(cols))
	if err != nil {
		t.Fatal(err)
	}
	dev.WriteI32(ct, cols)
	out, _ := dev.Alloc(tensor.F32, rows, len(cols))
	dev.GatherCols(out, x, ct)
	got := e.read(out)
	for r := 0; r < rows; r++ {
		for i, c := range cols {
			if got[r*len(cols)+i] != v[r*n+int(c)] {
				t.Fatalf("GatherCols row %d column %d: %v, want column %d's %v", r, i, got[r*len(cols)+i], c, v[r*n+int(c)])
			}
		}
	}
}

// ceRef returns the weighted cross-entropy and its gradient in float64 (rows
// with a zero weight or a negative target skipped, their gradient zero).
func ceRef(logits []float32, rows, v int, targets []int32, weights []float32) (float64, []float64) {
	var loss float64
	grad := make([]float64, rows*v)
	for r := 0; r < rows; r++ {
		w := 1.0
		if weights != nil {
			w = float64(weights[r])
		}
		tg := targets[r]
		if w == 0 || tg < 0 {
			continue
		}
		ls := logSoftmax(logits[r*v : r*v+v])
		loss -= w * ls[tg]
		for j, l := range ls {
			grad[r*v+j] = w * math.Exp(l)
		}
		grad[r*v+int(tg)] -= w
	}
	return loss, grad
}

func crossEntropy(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 21)
	// Few rows with weights, a skipped row of each kind; then more rows
	// than the kernels keep chunk sums for (so chunks hold several rows)
	// with unit weights and a few negative targets.
	type tc struct {
		rows, v int
		targets []int32
		weights []float32
	}
	many := tc{rows: 1000, v: 300, targets: make([]int32, 1000)}
	for r := range many.targets {
		many.targets[r] = max(int32(e.r.IntN(many.v+5))-5, -1)
	}
	for _, c := range []tc{
		{rows: 5, v: 11, targets: []int32{3, -1, 0, 10, 7}, weights: []float32{1, 1, 0.8, 0, 0.64}},
		many,
	} {
		rows, v := c.rows, c.v
		lv := e.rand(rows*v, 2)
		logits := e.tensor(lv, rows, v)
		targets := e.i32(c.targets)
		var weights tensor.Tensor
		if c.weights != nil {
			weights = e.tensor(c.weights, rows, 1)
		}
		want, wantGrad := ceRef(lv, rows, v, c.targets, c.weights)
		// The gradient overwrites what dlogits held.
		d := e.tensor(e.rand(rows*v, 1), rows, v)
		got := dev.CrossEntropy(d, logits, targets, weights)
		e.closeTo("CrossEntropy", got, want, 1e-6)
		e.near("CrossEntropy dlogits", e.read(d), wantGrad, gradTol(len(wantGrad)))
		e.same("CrossEntropy's logits", e.read(logits), lv)
		if l := dev.CrossEntropy(tensor.Tensor{}, logits, targets, weights); l != got {
			t.Fatalf("CrossEntropy without dlogits %v, with %v", l, got)
		}
		// dlogits aliasing the logits: the same loss and gradient, bit
		// for bit.
		if l := dev.CrossEntropy(logits, logits, targets, weights); l != got {
			t.Fatalf("CrossEntropy in place %v, into a separate tensor %v", l, got)
		}
		e.same("CrossEntropy in place", e.read(logits), e.read(d))
	}
}

// softRef returns the weighted soft cross-entropy and its gradient in
// float64.
func softRef(logits, p []float32, rows, v int, weights []float32) (float64, []float64) {
	var loss float64
	grad := make([]float64, rows*v)
	for r := 0; r < rows; r++ {
		w := float64(weights[r])
		if w == 0 {
			continue
		}
		ls := logSoftmax(logits[r*v : r*v+v])
		var psum float64
		for j := range ls {
			pj := float64(p[r*v+j])
			psum += pj
			loss -= w * pj * ls[j]
		}
		for j, l := range ls {
			grad[r*v+j] = w * (math.Exp(l)*psum - float64(p[r*v+j]))
		}
	}
	return loss, grad
}

func softCrossEntropy(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 22)
	for _, sh := range [][2]int{{5, 11}, {700, 90}} {
		rows, v := sh[0], sh[1]
		lv := e.rand(rows*v, 2)
		// Random distributions; row 2's does not sum to 1, row 1 has a zero.
		p := make([]float32, rows*v)
		for r := 0; r < rows; r++ {
			var s float32
			for j := 0; j < v; j++ {
				p[r*v+j] = e.r.Float32()
				s += p[r*v+j]
			}
			if r != 2 {
				for j := 0; j < v; j++ {
					p[r*v+j] /= s
				}
			}
		}
		p[v+4] = 0
		w := make([]float32, rows)
		for r := range w {
			w[r] = e.r.Float32()
		}
		w[3] = 0 // skipped
		logits, pt, wt := e.tensor(lv, rows, v), e.tensor(p, rows, v), e.tensor(w, rows, 1)
		want, wantGrad := softRef(lv, p, rows, v, w)
		d := e.tensor(e.rand(rows*v, 1), rows, v)
		got := dev.SoftCrossEntropy(d, logits, pt, wt)
		e.closeTo("SoftCrossEntropy", got, want, 1e-6)
		e.near("SoftCrossEntropy dlogits", e.read(d), wantGrad, gradTol(len(wantGrad)))
		e.same("SoftCrossEntropy's logits", e.read(logits), lv)
		if l := dev.SoftCrossEntropy(tensor.Tensor{}, logits, pt, wt); l != got {
			t.Fatalf("SoftCrossEntropy without dlogits %v, with %v", l, got)
		}
		if l := dev.SoftCrossEntropy(logits, logits, pt, wt); l != got {
			t.Fatalf("SoftCrossEntropy in place %v, into a separate tensor %v", l, got)
		}
		e.same("SoftCrossEntropy in place", e.read(logits), e.read(d))
	}
	// Without weights every row weighs 1.
	lv, p := e.rand(3*4, 1), []float32{1, 0, 0, 0, 0, 0.5, 0.5, 0, 0.25, 0.25, 0.25, 0.25}
	want, _ := softRef(lv, p, 3, 4, []float32{1, 1, 1})
	got := dev.SoftCrossEntropy(tensor.Tensor{}, e.tensor(lv, 3, 4), e.tensor(p, 3, 4), tensor.Tensor{})
	e.closeTo("SoftCrossEntropy without weights", got, want, 1e-6)
}

func crossEntropyEval(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 23)
	for _, sh := range [][2]int{{40, 13}, {400, 64}} {
		rows, v := sh[0], sh[1]
		lv := e.rand(rows*v, 2)
		for i := range lv[:rows*v/2] { // a few values each: many ties
			lv[i] = float32(math.Round(float64(lv[i])))
		}
		for j := 0; j < v; j++ { // a row of ties: every logit equal
			lv[5*v+j] = 0.5
		}
		tg := make([]int32, rows)
		for i := range tg {
			tg[i] = int32(e.r.IntN(v))
		}
		tg[7] = -1
		logits := e.tensor(lv, rows, v)
		loss, rank := make([]float64, rows), make([]int32, rows)
		dev.CrossEntropyEval(loss, rank, logits, e.i32(tg))
		e.same("CrossEntropyEval's logits", e.read(logits), lv)
		for r := 0; r < rows; r++ {
			if tg[r] < 0 {
				if loss[r] != 0 || rank[r] != -1 {
					t.Fatalf("row %d without target: loss %g rank %d", r, loss[r], rank[r])
				}
				continue
			}
			row := lv[r*v : r*v+v]
			e.closeTo("CrossEntropyEval loss", loss[r], -logSoftmax(row)[tg[r]], 1e-6)
			// The rank from a sort: ties count in the target's favour.
			idx := make([]int, v)
			for j := range idx {
				idx[j] = j
			}
			sort.SliceStable(idx, func(a, b int) bool { return row[idx[a]] > row[idx[b]] })
			want := 0
			for idx[want] != int(tg[r]) && row[idx[want]] > row[tg[r]] {
				want++
			}
			if int(rank[r]) != want {
				t.Fatalf("row %d: rank %d, want %d", r, rank[r], want)
			}
		}
		if rank[5] != 0 {
			t.Fatalf("all-tied row ranks its target %d, want 0", rank[5])
		}
	}
}

func topK(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 24)
	x := e.tensor([]float32{0.5, 2, -1, 2, 0.5, 3}, 1, 6)
	for _, c := range []struct {
		k    int
		want []int
	}{
		{0, []int{}},
		{1, []int{5}},
		{3, []int{5, 1, 3}},
		{5, []int{5, 1, 3, 0, 4}},
		{9, []int{5, 1, 3, 0, 4, 2}},
	} {
		idx := make([]int, c.k)
		if n := dev.TopK(idx, x); !slices.Equal(idx[:n], c.want) {
			t.Fatalf("TopK %d: %v, want %v", c.k, idx[:n], c.want)
		}
	}
	for trial := 0; trial < 50; trial++ {
		n := 1 + e.r.IntN(300)
		v := e.rand(n, 1)
		if trial%2 == 0 { // few distinct values: many ties
			for i := range v {
				v[i] = float32(math.Round(float64(v[i]) * 2))
			}
		}
		row := e.tensor(v, 1, n)
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		sort.SliceStable(want, func(a, b int) bool { return v[want[a]] > v[want[b]] })
		for _, k := range []int{1, 2, 7, n, n + 3} {
			idx := make([]int, k)
			got := dev.TopK(idx, row)
			if m := min(k, n); got != m || !slices.Equal(idx[:got], want[:m]) {
				t.Fatalf("TopK %d of %v: %v (%d), want %v", k, v, idx[:got], got, want[:m])
			}
		}
	}
	// A decoding loop keeps its index slice: selecting allocates nothing.
	idx := make([]int, 3)
	if a := testing.AllocsPerRun(10, func() { dev.TopK(idx, x) }); a != 0 {
		t.Fatalf("TopK allocates %v times", a)
	}
}

// halfFormat is a 16-bit float format: p significand bits (the implicit
// one included), normal exponents emin..emax.
type halfFormat struct {
	dt         tensor.DType
	p          int
	emin, emax int
}

var halfFormats = []halfFormat{{tensor.BF16, 8, -126, 127}, {tensor.F16, 11, -14, 15}}

// round returns x rounded to the format, to the nearest value, ties to the
// even significand, in float64: past the largest finite value plus half its
// ulp (the tie included, as the largest value's significand is odd) an
// infinity.
func (f halfFormat) round(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	a := math.Abs(x)
	ex := max(math.Ilogb(a), f.emin) // subnormals share emin's spacing
	ulp := math.Ldexp(1, ex-(f.p-1))
	y := math.RoundToEven(a/ulp) * ulp
	if y > math.Ldexp(2-math.Ldexp(1, 1-f.p), f.emax) {
		y = math.Inf(1)
	}
	return math.Copysign(y, x)
}

// decode returns the value of the 16-bit pattern h in the format.
func (f halfFormat) decode(h uint16) float64 {
	mant := f.p - 1
	ebits := 15 - mant
	e := int(h>>mant) & (1<<ebits - 1)
	m := float64(h & (1<<mant - 1))
	var v float64
	switch {
	case e == 1<<ebits-1 && m != 0:
		v = math.NaN()
	case e == 1<<ebits-1:
		v = math.Inf(1)
	case e == 0:
		v = math.Ldexp(m, f.emin-mant)
	default:
		v = math.Ldexp(1+m/float64(int(1)<<mant), e+f.emin-1)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// castValues returns values that probe the format's rounding: random values
// over many scales, the exact ties between neighbours (both parities),
// values just beside them, subnormals and their ties, the values around the
// overflow threshold, and the specials.
func (f halfFormat) castValues(e *env) []float32 {
	var v []float32
	for _, s := range []float64{1e-6, 1e-3, 1, 300, 3e4, 1e30} {
		v = append(v, e.rand(2000, s)...)
	}
	emaxV := math.Ldexp(2-math.Ldexp(1, 1-f.p), f.emax)
	top := math.Ldexp(1, f.emax-(f.p-1)) // the ulp of the largest binade
	sub := math.Ldexp(1, f.emin-(f.p-1)) // the smallest subnormal
	for i := 0; i < 300; i++ {
		// A random representable value and its upper neighbour's tie.
		ex := f.emin + e.r.IntN(f.emax-f.emin+1)
		ulp := math.Ldexp(1, ex-(f.p-1))
		m := float64(int(1)<<(f.p-1) + e.r.IntN(1<<(f.p-1)))
		tie := (m + 0.5) * ulp
		if t32 := float32(tie); float64(t32) == tie {
			v = append(v, t32, math.Nextafter32(t32, 0), math.Nextafter32(t32, float32(math.Inf(1))), -t32)
		}
		st := (float64(e.r.IntN(1<<(f.p-1))) + 0.5) * sub // a subnormal tie
		if s32 := float32(st); float64(s32) == st {
			v = append(v, s32, math.Nextafter32(s32, 1), -s32)
		}
	}
	for _, x := range []float64{emaxV, emaxV + top/2, emaxV + top/4, emaxV + 3*top/4, 2 * emaxV, sub / 2, sub / 4, sub * 0.75, math.MaxFloat32, 1, -0.0} {
		x32 := float32(x)
		v = append(v, x32, -x32, math.Nextafter32(x32, 0), math.Nextafter32(x32, float32(math.Inf(1))))
	}
	v = append(v, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.Float32frombits(0x00000001))
	return v
}

// sameValue reports whether got is want (NaN for NaN, zeros by sign).
func sameValue(got float32, want float64) bool {
	if math.IsNaN(want) {
		return math.IsNaN(float64(got))
	}
	return float64(got) == want && math.Signbit(float64(got)) == math.Signbit(want)
}

func cast(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 25)
	alloc := func(dt tensor.DType, n int) tensor.Tensor {
		x, err := dev.Alloc(dt, 1, n)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	// Widening: every 16-bit pattern, exactly.
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	for _, f := range halfFormats {
		h, err := dev.Upload(tensor.HalfMatrix(f.dt, all, 1, len(all)))
		if err != nil {
			t.Fatal(err)
		}
		out := alloc(tensor.F32, len(all))
		dev.Cast(out, h)
		got := e.read(out)
		for i, g := range got {
			if want := f.decode(uint16(i)); !sameValue(g, want) {
				t.Fatalf("Cast %s to F32: pattern %#04x is %v, want %v", f.dt, i, g, want)
			}
		}
		// 16-bit to 16-bit: the other format's rounding of each value,
		// and a copy within the format.
		for _, o := range halfFormats {
			dst := alloc(o.dt, len(all))
			dev.Cast(dst, h)
			back := alloc(tensor.F32, len(all))
			dev.Cast(back, dst)
			for i, g := range e.read(back) {
				if want := o.round(float64(got[i])); !sameValue(g, want) {
					t.Fatalf("Cast %s to %s: %v is %v, want %v", f.dt, o.dt, got[i], g, want)
				}
			}
		}
	}
	// Narrowing, then widening back (exact, checked above).
	for _, f := range halfFormats {
		v := f.castValues(e)
		for len(v) < 600_000 { // large enough to be split over the workers
			v = append(v, e.rand(100_000, 10)...)
		}
		h, back := alloc(f.dt, len(v)), alloc(tensor.F32, len(v))
		dev.Cast(h, e.tensor(v, 1, len(v)))
		dev.Cast(back, h)
		for i, g := range e.read(back) {
			if want := f.round(float64(v[i])); !sameValue(g, want) {
				t.Fatalf("Cast F32 to %s: value %d (%v) is %v, want %v", f.dt, i, v[i], g, want)
			}
		}
	}
	// F32 to F32 copies.
	v := e.rand(100, 1)
	out := alloc(tensor.F32, 100)
	dev.Cast(out, e.tensor(v, 1, 100))
	e.same("Cast F32 to F32", e.read(out), v)
}
