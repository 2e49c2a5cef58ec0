// Package optim holds the optimisation pieces of the training loop (train/loop): AdamW
// with float32 master weights, the warm-up + cosine learning-rate schedule,
// global gradient-norm clipping and an atomic checkpoint file that lets a run
// resume bit-identically.
package optim

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// Param is one named trainable tensor: its float32 master weights and the
// gradient buffer the backward pass accumulates into (same length).
type Param struct {
	Name string
	Data []float32
	Grad []float32
}

// AdamWConfig holds the optimiser's hyper-parameters (the learning rate is passed
// to each Step so a schedule can drive it).
type AdamWConfig struct {
	Beta1, Beta2 float64 // moment decay rates; 0.9 and 0.999 when both are zero
	Eps          float64 // added to sqrt(v-hat); 1e-8 when zero
	WeightDecay  float64 // decoupled weight decay; 0 disables it
}

// DefaultAdamW is AdamW with PyTorch's defaults and no weight decay.
func DefaultAdamW() AdamWConfig { return AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8} }

// AdamW is the decoupled-weight-decay Adam optimiser with PyTorch's semantics
// (torch.optim.AdamW, non-amsgrad): at step t (1-based)
//
//	p -= lr*wd*p
//	m  = b1*m + (1-b1)*g
//	v  = b2*v + (1-b2)*g^2
//	p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
//
// Moments are float32 and allocated once by NewAdamW. The updates, the
// gradients' zeroing, norm and clipping run as the ops of a CPU device over
// the parameters' host memory.
type AdamW struct {
	Config AdamWConfig
	Params []Param
	M, V   [][]float32 // first and second moments, one slice per parameter
	// StepCount is the number of updates applied so far.
	StepCount int64

	dev tensor.Device
}

// NewAdamW validates the parameters (unique names, len(Data) == len(Grad)) and
// allocates the zeroed moments.
func NewAdamW(params []Param, cfg AdamWConfig) (*AdamW, error) {
	if cfg.Beta1 == 0 && cfg.Beta2 == 0 {
		cfg.Beta1, cfg.Beta2 = 0.9, 0.999
	}
	if cfg.Eps == 0 {
		cfg.Eps = 1e-8
	}
	if cfg.Beta1 < 0 || cfg.Beta1 >= 1 || cfg.Beta2 < 0 || cfg.Beta2 >= 1 || cfg.Eps < 0 || cfg.WeightDecay < 0 {
		return nil, fmt.Errorf("optim: AdamW betas must lie in [0,1) and eps, weight decay be >= 0, got betas %g/%g eps %g wd %g",
			cfg.Beta1, cfg.Beta2, cfg.Eps, cfg.WeightDecay)
	}
	seen := make(map[string]bool, len(params))
	o := &AdamW{Config: cfg, Params: params, M: make([][]float32, len(params)), V: make([][]float32, len(params)),
		dev: cpu.New(cpu.PureGo())} // element-wise ops only: the backend is never called
	for i, p := range params {
		if p.Name == "" || seen[p.Name] {
			return nil, fmt.Errorf("optim: parameter %d has an empty or duplicate name %q", i, p.Name)
		}
		seen[p.Name] = true
		if len(p.Data) != len(p.Grad) {
			return nil, fmt.Errorf("optim: parameter %q has %d values but %d gradients", p.Name, len(p.Data), len(p.Grad))
		}
		o.M[i] = make([]float32, len(p.Data))
		o.V[i] = make([]float32, len(p.Data))
	}
	return o, nil
}

// ZeroGrad sets every gradient to zero (the backward passes accumulate).
func (o *AdamW) ZeroGrad() {
	for _, p := range o.Params {
		o.dev.Zero(host(p.Grad))
	}
}

// host returns v as a tensor of the CPU device.
func host(v []float32) tensor.Tensor { return cpu.HostTensor(v, 1, len(v)) }

// Step applies one AdamW update with learning rate lr to every parameter using
// the gradients currently in Grad, and increments StepCount.
func (o *AdamW) Step(lr float64) {
	o.StepCount++
	t := float64(o.StepCount)
	c := o.Config
	bc1 := 1 - math.Pow(c.Beta1, t)
	bc2 := 1 - math.Pow(c.Beta2, t)
	s := tensor.AdamWStep{
		Decay:         float32(1 - lr*c.WeightDecay),
		Beta1:         float32(c.Beta1),
		Beta2:         float32(c.Beta2),
		OneMinusBeta1: float32(1 - c.Beta1),
		OneMinusBeta2: float32(1 - c.Beta2),
		StepSize:      float32(lr / bc1),
		SqrtBC2:       float32(math.Sqrt(bc2)),
		Eps:           float32(c.Eps),
	}
	for i, p := range o.Params {
		o.dev.AdamW(host(p.Data), host(p.Grad), host(o.M[i]), host(o.V[i]), s)
	}
}

// Schedule is linear warm-up followed by cosine decay to a floor:
// for step < Warmup the rate is Base*(step+1)/Warmup (so the first update is not
// wasted at zero); afterwards, with progress p = (step-Warmup)/(Total-Warmup)
// clamped to [0,1], it is Base*(MinRatio + (1-MinRatio)*(1+cos(pi*p))/2).
// Steps are 0-based update indices; Total is the number of updates of the run.
type Schedule struct {
	Base     float64
	MinRatio float64
	Warmup   int
	Total    int
}

// LR returns the learning rate for the 0-based update index step.
func (s Schedule) LR(step int) float64 {
	if step < s.Warmup {
		return s.Base * float64(step+1) / float64(s.Warmup)
	}
	span := s.Total - s.Warmup
	p := 1.0
	if span > 0 {
		p = math.Min(1, math.Max(0, float64(step-s.Warmup)/float64(span)))
	}
	return s.Base * (s.MinRatio + (1-s.MinRatio)*0.5*(1+math.Cos(math.Pi*p)))
}

// GradNorm returns the global L2 norm of all gradients, accumulated in float64.
func (o *AdamW) GradNorm() float64 {
	var sum float64
	for _, p := range o.Params {
		sum += o.dev.SumSquares(host(p.Grad))
	}
	return math.Sqrt(sum)
}

// ClipGradNorm scales all gradients by maxNorm/(norm+1e-6) when the global norm
// exceeds maxNorm (torch.nn.utils.clip_grad_norm_) and returns the norm before
// clipping. maxNorm <= 0 disables clipping (the norm is still returned).
func (o *AdamW) ClipGradNorm(maxNorm float64) float64 {
	norm := o.GradNorm()
	if maxNorm <= 0 || norm <= maxNorm || math.IsNaN(norm) || math.IsInf(norm, 0) {
		return norm
	}
	scale := float32(maxNorm / (norm + 1e-6))
	for _, p := range o.Params {
		o.dev.Scale(host(p.Grad), scale)
	}
	return norm
}
