package nn

import (
	"fmt"
	"math"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// RopeScaling describes a rope_scaling entry of a Hugging Face config. Type is
// "llama3" or "linear"; the other fields are those types' parameters.
type RopeScaling struct {
	Type                 string
	Factor               float64
	LowFreqFactor        float64
	HighFreqFactor       float64
	OriginalMaxPositions int
}

// RoPE holds the tables of rotary position embeddings, which a device's RoPE
// and RoPEBackward apply (On), in the rotate_half convention of Hugging Face
// Llama: within each head of dimension d, element i < d/2 is paired
// with element i + d/2 and rotated by the angle pos * invFreq[i].
//
// Angles follow the reference arithmetic: invFreq is rounded to float32 and the
// product pos*invFreq is taken in float32 (as torch does), then cos and sin are
// evaluated and rounded. A table covers positions below maxPos; positions beyond
// it are computed on the fly.
type RoPE struct {
	headDim int
	invFreq []float32
	cos     []float32 // [maxPos][headDim/2]
	sin     []float32
	maxPos  int
}

// NewRoPE builds the rotation tables for heads of dimension headDim with base
// theta, optional scaling, and positions [0, maxPos).
func NewRoPE(headDim int, theta float64, s *RopeScaling, maxPos int) (*RoPE, error) {
	if headDim <= 0 || headDim%2 != 0 {
		return nil, fmt.Errorf("rope: head dimension %d must be positive and even", headDim)
	}
	if theta <= 0 {
		return nil, fmt.Errorf("rope: rope_theta %g must be positive", theta)
	}
	half := headDim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(theta, float64(float32(2*i)/float32(headDim)))
	}
	if s != nil {
		switch s.Type {
		case "linear":
			if s.Factor <= 0 {
				return nil, fmt.Errorf("rope: linear rope_scaling factor %g must be positive", s.Factor)
			}
			for i := range inv {
				inv[i] /= s.Factor
			}
		case "llama3":
			if s.Factor <= 0 || s.LowFreqFactor <= 0 || s.HighFreqFactor <= s.LowFreqFactor || s.OriginalMaxPositions <= 0 {
				return nil, fmt.Errorf("rope: llama3 rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0 (got %+v)", *s)
			}
			old := float64(s.OriginalMaxPositions)
			lowWave, highWave := old/s.LowFreqFactor, old/s.HighFreqFactor
			for i, f := range inv {
				wave := 2 * math.Pi / f
				switch {
				case wave < highWave:
					// High frequencies are kept.
				case wave > lowWave:
					inv[i] = f / s.Factor
				default:
					smooth := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
					inv[i] = (1-smooth)*f/s.Factor + smooth*f
				}
			}
		default:
			return nil, fmt.Errorf("rope: unsupported rope_scaling type %q (supported: llama3, linear)", s.Type)
		}
	}
	r := &RoPE{headDim: headDim, invFreq: make([]float32, half), maxPos: maxPos}
	for i, f := range inv {
		r.invFreq[i] = float32(f)
	}
	if maxPos > 0 {
		r.cos = make([]float32, maxPos*half)
		r.sin = make([]float32, maxPos*half)
		for p := 0; p < maxPos; p++ {
			for i := 0; i < half; i++ {
				c, s := r.angle(p, i)
				r.cos[p*half+i], r.sin[p*half+i] = c, s
			}
		}
	}
	return r, nil
}

// HeadDim returns the head dimension the tables were built for.
func (r *RoPE) HeadDim() int { return r.headDim }

func (r *RoPE) angle(pos, i int) (float32, float32) { return tensor.RoPEAngle(pos, r.invFreq[i]) }

// On returns the rotation tables in dev's memory, for dev.RoPE.
func (r *RoPE) On(dev tensor.Device) (*tensor.Rotary, error) {
	half := r.headDim / 2
	rt := &tensor.Rotary{HeadDim: r.headDim, MaxPos: r.maxPos}
	var err error
	if rt.InvFreq, err = dev.Upload(tensor.F32Matrix(r.invFreq, 1, half)); err != nil {
		return nil, fmt.Errorf("rope: %w", err)
	}
	if r.maxPos > 0 {
		if rt.Cos, err = dev.Upload(tensor.F32Matrix(r.cos, r.maxPos, half)); err != nil {
			return nil, fmt.Errorf("rope: %w", err)
		}
		if rt.Sin, err = dev.Upload(tensor.F32Matrix(r.sin, r.maxPos, half)); err != nil {
			return nil, fmt.Errorf("rope: %w", err)
		}
	}
	return rt, nil
}
