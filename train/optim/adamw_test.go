package optim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// testDev is the CPU device the tests' parameters live on: its tensors view
// the host slices the tests fill and read.
var testDev = cpu.New(nil)

// vec returns v as a one-row tensor of testDev, viewing v.
func vec(v []float32) tensor.Tensor {
	t, err := testDev.Upload(tensor.F32Matrix(v, 1, len(v)))
	if err != nil {
		panic(err)
	}
	return t
}

// host returns the values of a tensor of testDev.
func host(t tensor.Tensor) []float32 {
	v, _ := testDev.HostF32(t)
	return v
}

// param returns the parameter name of values data and gradient grad on
// testDev, viewing them.
func param(name string, data, grad []float32) Param {
	return Param{Name: name, Data: vec(data), Grad: vec(grad)}
}

// refAdamW is an independent float64 transcription of the AdamW algorithm as
// documented for torch.optim.AdamW (decoupled decay, bias-corrected moments).
type refAdamW struct {
	b1, b2, eps, wd float64
	p, m, v         []float64
	t               int
}

func (r *refAdamW) step(g []float64, lr float64) {
	r.t++
	for i := range r.p {
		r.p[i] -= lr * r.wd * r.p[i]
		r.m[i] = r.b1*r.m[i] + (1-r.b1)*g[i]
		r.v[i] = r.b2*r.v[i] + (1-r.b2)*g[i]*g[i]
		mhat := r.m[i] / (1 - math.Pow(r.b1, float64(r.t)))
		vhat := r.v[i] / (1 - math.Pow(r.b2, float64(r.t)))
		r.p[i] -= lr * mhat / (math.Sqrt(vhat) + r.eps)
	}
}

func TestAdamWMatchesFloat64Reference(t *testing.T) {
	for _, wd := range []float64{0, 0.1} {
		rng := rand.New(rand.NewPCG(1, 2))
		n := 1000
		data := make([]float32, n)
		grad := make([]float32, n)
		ref := &refAdamW{b1: 0.9, b2: 0.999, eps: 1e-8, wd: wd, p: make([]float64, n), m: make([]float64, n), v: make([]float64, n)}
		for i := range data {
			data[i] = float32(rng.NormFloat64())
			ref.p[i] = float64(data[i])
		}
		cfg := DefaultAdamW()
		cfg.WeightDecay = wd
		o, err := NewAdamW(testDev, []Param{param("w", data, grad)}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		g64 := make([]float64, n)
		lrs := []float64{1e-2, 3e-3, 5e-2, 1e-3, 2e-2}
		for s, lr := range lrs {
			for i := range grad {
				// Mix of scales, including tiny gradients where eps matters.
				grad[i] = float32(rng.NormFloat64() * math.Pow(10, float64(i%7-5)))
				g64[i] = float64(grad[i])
			}
			o.Step(lr)
			ref.step(g64, lr)
			for i := range data {
				if d := math.Abs(float64(data[i]) - ref.p[i]); d > 1e-6*(1+math.Abs(ref.p[i])) {
					t.Fatalf("wd=%g step %d elem %d: got %.9g want %.9g", wd, s+1, i, data[i], ref.p[i])
				}
			}
		}
		if o.StepCount != int64(len(lrs)) {
			t.Fatalf("StepCount %d", o.StepCount)
		}
	}
}

// TestAdamWFirstStepHandValue checks the first update by hand: with bias
// correction m-hat = g and v-hat = g^2, so the step is lr*g/(|g|+eps) ~ lr*sign(g).
func TestAdamWFirstStepHandValue(t *testing.T) {
	d := []float32{1, -2, 0.5}
	g := []float32{0.3, -4, 0}
	o, err := NewAdamW(testDev, []Param{param("x", d, g)}, AdamWConfig{WeightDecay: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	o.Step(0.1)
	// p*(1-0.05) - 0.1*g/(|g|+1e-8)
	want := []float64{1*0.95 - 0.1*0.3/(0.3+1e-8), -2*0.95 + 0.1*4/(4+1e-8), 0.5 * 0.95}
	for i := range d {
		if math.Abs(float64(d[i])-want[i]) > 1e-6 {
			t.Fatalf("elem %d: got %g want %g", i, d[i], want[i])
		}
	}
}

func TestNewAdamWRejectsBadParams(t *testing.T) {
	if _, err := NewAdamW(testDev, []Param{param("a", make([]float32, 2), make([]float32, 3))}, DefaultAdamW()); err == nil {
		t.Fatal("length mismatch accepted")
	}
	p := param("a", make([]float32, 2), make([]float32, 2))
	if _, err := NewAdamW(testDev, []Param{p, p}, DefaultAdamW()); err == nil {
		t.Fatal("duplicate name accepted")
	}
}

func TestScheduleKnownPoints(t *testing.T) {
	s := Schedule{Base: 1e-2, MinRatio: 0.1, Warmup: 10, Total: 110}
	cases := []struct {
		step int
		want float64
	}{
		{0, 1e-3},    // (0+1)/10 of base
		{4, 5e-3},    // 5/10
		{9, 1e-2},    // end of warm-up: full rate
		{10, 1e-2},   // progress 0: cos(0)=1
		{60, 5.5e-3}, // progress 1/2: 0.1 + 0.9*0.5
		{110, 1e-3},  // progress 1: the floor
		{500, 1e-3},  // past the end: clamped to the floor
	}
	for _, c := range cases {
		if got := s.LR(c.step); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("LR(%d) = %.17g, want %g", c.step, got, c.want)
		}
	}
	// progress 1/4: 0.1 + 0.9*(1+cos(pi/4))/2
	if got, want := s.LR(35), 1e-2*(0.1+0.9*(1+math.Sqrt2/2)/2); math.Abs(got-want) > 1e-15 {
		t.Errorf("LR(35) = %g want %g", got, want)
	}
	// Monotone non-increasing after warm-up.
	for st := 10; st < 120; st++ {
		if s.LR(st+1) > s.LR(st) {
			t.Fatalf("LR increases at step %d", st)
		}
	}
}

func TestClipGradNorm(t *testing.T) {
	ag, bg := []float32{3, 0}, []float32{4}
	a := param("a", make([]float32, 2), ag)
	b := param("b", make([]float32, 1), bg)
	o, err := NewAdamW(testDev, []Param{a, b}, DefaultAdamW())
	if err != nil {
		t.Fatal(err)
	}
	if n := o.ClipGradNorm(10); n != 5 {
		t.Fatalf("norm %g want 5", n)
	}
	if ag[0] != 3 || bg[0] != 4 {
		t.Fatal("gradients changed below the threshold")
	}
	if n := o.ClipGradNorm(1); n != 5 {
		t.Fatalf("pre-clip norm %g want 5", n)
	}
	if post := o.GradNorm(); math.Abs(post-1) > 1e-6 {
		t.Fatalf("post-clip norm %g want 1", post)
	}
	if math.Abs(float64(ag[0])-0.6) > 1e-6 || math.Abs(float64(bg[0])-0.8) > 1e-6 {
		t.Fatalf("direction changed: %v %v", ag, bg)
	}
	// float64 accumulation: 1e6 values of 1e-3 sum of squares exactly 1.
	big := make([]float32, 1_000_000)
	for i := range big {
		big[i] = 1e-3
	}
	oz, err := NewAdamW(testDev, []Param{param("z", big, big)}, DefaultAdamW())
	if err != nil {
		t.Fatal(err)
	}
	if n := oz.GradNorm(); math.Abs(n-1) > 1e-7 {
		t.Fatalf("norm %v want 1", n)
	}
}
