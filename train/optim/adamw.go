// Package optim holds the optimisation pieces of the training loop (train/loop): AdamW
// with float32 master weights, the warm-up + cosine learning-rate schedule,
// global gradient-norm clipping and an atomic checkpoint file that lets a run
// resume bit-identically.
package optim

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// Param is one named trainable tensor on the optimiser's device: its float32
// master weights and the gradient the backward pass accumulates into (the
// same number of values). The optimiser reaches their values only through
// the device's ops, and the checkpoint through its Read and Write.
type Param struct {
	Name       string
	Data, Grad tensor.Tensor
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
// The parameters, their gradients and the float32 moments (allocated once by
// NewAdamW) live on one device, whose ops run the updates, the gradients'
// zeroing, norm and clipping: the state never leaves the device during
// training (the checkpoint reads it back, SaveCheckpoint).
type AdamW struct {
	Config AdamWConfig
	Params []Param
	// M and V are the first and second moments, one tensor per parameter
	// on the device, of its parameter's shape.
	M, V []tensor.Tensor
	// StepCount is the number of updates applied so far.
	StepCount int64

	dev tensor.Device
}

// NewAdamW validates the parameters (unique names, float32 Data and Grad of
// the same number of values) and allocates the zeroed moments on dev, the
// device the parameters live on, whose ops the optimiser then runs (dev
// serves the optimiser alone: pass a sibling of the trainer's device).
func NewAdamW(dev tensor.Device, params []Param, cfg AdamWConfig) (*AdamW, error) {
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
	if dev == nil {
		return nil, fmt.Errorf("optim: AdamW needs the parameters' device")
	}
	o := &AdamW{Config: cfg, Params: params, M: make([]tensor.Tensor, len(params)), V: make([]tensor.Tensor, len(params)), dev: dev}
	for i, p := range params {
		if p.Name == "" || seen[p.Name] {
			return nil, fmt.Errorf("optim: parameter %d has an empty or duplicate name %q", i, p.Name)
		}
		seen[p.Name] = true
		if p.Data.Len() != p.Grad.Len() {
			return nil, fmt.Errorf("optim: parameter %q has %d values but %d gradients", p.Name, p.Data.Len(), p.Grad.Len())
		}
		if p.Data.DType() != tensor.F32 || p.Grad.DType() != tensor.F32 {
			return nil, fmt.Errorf("optim: parameter %q is %s with %s gradients, want float32 for both", p.Name, p.Data.DType(), p.Grad.DType())
		}
		var err error
		if o.M[i], err = dev.Alloc(tensor.F32, p.Data.Rows(), p.Data.Cols()); err != nil {
			return nil, fmt.Errorf("optim: moments of %q: %w", p.Name, err)
		}
		if o.V[i], err = dev.Alloc(tensor.F32, p.Data.Rows(), p.Data.Cols()); err != nil {
			return nil, fmt.Errorf("optim: moments of %q: %w", p.Name, err)
		}
	}
	return o, nil
}

// Device returns the device the optimiser's parameters and moments live on.
func (o *AdamW) Device() tensor.Device { return o.dev }

// ZeroGrad sets every gradient to zero (the backward passes accumulate).
func (o *AdamW) ZeroGrad() {
	for _, p := range o.Params {
		o.dev.Zero(p.Grad)
	}
}

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
		o.dev.AdamW(p.Data, p.Grad, o.M[i], o.V[i], s)
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
		sum += o.dev.SumSquares(p.Grad)
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
		o.dev.Scale(p.Grad, scale)
	}
	return norm
}
