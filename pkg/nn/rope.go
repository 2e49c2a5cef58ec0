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
	// ShortFactor and LongFactor are longrope's per-frequency divisors, one
	// per rotated pair: positions below OriginalMaxPositions turn by the
	// short ones, positions from there on by the long ones.
	ShortFactor, LongFactor []float64
	// BetaFast, BetaSlow and Truncate shape yarn's ramp between the
	// original frequencies (fast rotations) and the interpolated ones.
	BetaFast, BetaSlow float64
	Truncate           bool
}

// RoPE holds the tables of rotary position embeddings, which a device's RoPE
// and RoPEBackward apply (On), in the rotate_half convention of Hugging Face
// Llama: within each head, of the first d values (d the rotary dimensions:
// the head dimension, or fewer for a partial rotary), element i < d/2 is
// paired with element i + d/2 and rotated by the angle pos * invFreq[i].
//
// Angles follow the reference arithmetic: invFreq is rounded to float32 and the
// product pos*invFreq is taken in float32 (as torch does), then cos and sin are
// evaluated and rounded. A table covers positions below maxPos; positions beyond
// it are computed on the fly.
type RoPE struct {
	headDim int
	dims    int // rotated values per head: headDim, or fewer (partial)
	factor  float32
	invFreq []float32
	// shortInv and longFrom are longrope's short-range frequencies and
	// original_max_position_embeddings (invFreq holding the long-range
	// ones); longFrom is 0 otherwise. See LongFrom.
	shortInv []float32
	longFrom int
	cos      []float32 // [maxPos][dims/2]
	sin      []float32
	maxPos   int
}

// RoPEOptions are the rotary variants of architectures beyond Llama's, for
// NewRoPEWith; the zero value is Llama's rotary, so that NewRoPE's callers
// keep their numbers.
type RoPEOptions struct {
	// RotaryDims is the number of rotated values per head (Phi-3/Phi-4's
	// partial_rotary_factor times the head dimension): even, positive and at
	// most the head dimension; 0 means the head dimension. The inverse
	// frequencies are spread over RotaryDims as Hugging Face spreads a
	// partial rotary's (base^(-2i/RotaryDims)).
	RotaryDims int
	// AttnFactor multiplies every cos and sin (LongRoPE's and YaRN's
	// attention factor); 0 means 1. The device applies it (see
	// tensor.Rotary.AttnFactor), to the tables and past them alike.
	AttnFactor float64
}

// NewRoPE builds the rotation tables for heads of dimension headDim with base
// theta, optional scaling, and positions [0, maxPos).
func NewRoPE(headDim int, theta float64, s *RopeScaling, maxPos int) (*RoPE, error) {
	return NewRoPEWith(headDim, theta, s, maxPos, RoPEOptions{})
}

// NewRoPEWith is NewRoPE with the variants of o: a partial rotary, an
// attention factor. A user's configuration reaches it, so bad values are
// errors.
func NewRoPEWith(headDim int, theta float64, s *RopeScaling, maxPos int, o RoPEOptions) (*RoPE, error) {
	if headDim <= 0 || headDim%2 != 0 {
		return nil, fmt.Errorf("rope: head dimension %d must be positive and even", headDim)
	}
	if theta <= 0 {
		return nil, fmt.Errorf("rope: rope_theta %g must be positive", theta)
	}
	dims := o.RotaryDims
	if dims == 0 {
		dims = headDim
	}
	if dims <= 0 || dims%2 != 0 || dims > headDim {
		return nil, fmt.Errorf("rope: %d rotary dimensions of a head of %d: they must be even, positive and at most the head dimension", dims, headDim)
	}
	if o.AttnFactor < 0 || math.IsNaN(o.AttnFactor) || math.IsInf(o.AttnFactor, 0) {
		return nil, fmt.Errorf("rope: attention factor %g must be positive and finite (0: none)", o.AttnFactor)
	}
	half := dims / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(theta, float64(float32(2*i)/float32(dims)))
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
		case "yarn":
			if s.Factor <= 0 || s.OriginalMaxPositions <= 0 || s.BetaFast <= 0 || s.BetaSlow <= 0 {
				return nil, fmt.Errorf("rope: yarn rope_scaling needs factor, original_max_position_embeddings, beta_fast and beta_slow positive (got %+v)", *s)
			}
			yarn(inv, theta, dims, s)
		case "longrope":
			if len(s.ShortFactor) != half || len(s.LongFactor) != half || s.OriginalMaxPositions <= 0 {
				return nil, fmt.Errorf("rope: longrope rope_scaling needs %d short and long factors (rotary dims / 2) and original_max_position_embeddings > 0 (got %d, %d and %d)",
					half, len(s.ShortFactor), len(s.LongFactor), s.OriginalMaxPositions)
			}
		default:
			return nil, fmt.Errorf("rope: unsupported rope_scaling type %q (supported: llama3, linear, longrope)", s.Type)
		}
	}
	r := &RoPE{headDim: headDim, dims: dims, factor: float32(o.AttnFactor), invFreq: make([]float32, half), maxPos: maxPos}
	for i, f := range inv {
		r.invFreq[i] = float32(f)
	}
	if s != nil && s.Type == "longrope" {
		// Two tables in one: rows [0, L) turn position p by the short
		// factors, rows [L, L+maxPos) position p-L by the long ones (L =
		// original_max_position_embeddings), so that a caller picks the
		// range of a pass by shifting its positions (LongFrom). maxPos
		// must then cover every position: no row is computed on the fly.
		r.shortInv, r.longFrom = make([]float32, half), s.OriginalMaxPositions
		for i := range inv {
			// Transformers' float32 arithmetic: 1/(factor·base^(2i/d)).
			b := float32(math.Pow(theta, float64(float32(2*i)/float32(dims))))
			r.shortInv[i] = 1 / (float32(s.ShortFactor[i]) * b)
			r.invFreq[i] = 1 / (float32(s.LongFactor[i]) * b)
		}
		r.maxPos = s.OriginalMaxPositions + maxPos
		maxPos = r.maxPos
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

// yarn sets inv to YaRN's frequencies as Transformers computes them in
// float32: each pair's original frequency and its interpolation (divided by
// the factor) blended by a linear ramp over the pairs between the
// correction dimensions of beta_fast and beta_slow rotations within the
// original context.
func yarn(inv []float64, theta float64, dims int, s *RopeScaling) {
	corr := func(rot float64) float64 {
		return float64(dims) * math.Log(float64(s.OriginalMaxPositions)/(rot*2*math.Pi)) / (2 * math.Log(theta))
	}
	lo, hi := corr(s.BetaFast), corr(s.BetaSlow)
	if s.Truncate {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	lo, hi = max(lo, 0), min(hi, float64(dims-1))
	if lo == hi {
		hi += 0.001
	}
	for i := range inv {
		pos := float32(math.Pow(theta, float64(float32(2*i)/float32(dims))))
		extra, inter := 1/pos, 1/(float32(s.Factor)*pos)
		ramp := min(max((float32(i)-float32(lo))/(float32(hi)-float32(lo)), 0), 1)
		ef := 1 - ramp
		inv[i] = float64(inter*(1-ef) + extra*ef)
	}
}

// HeadDim returns the head dimension the tables were built for.
func (r *RoPE) HeadDim() int { return r.headDim }

// RotaryDims returns the rotated values per head: the head dimension, or
// fewer for a partial rotary.
func (r *RoPE) RotaryDims() int { return r.dims }

// LongFrom returns longrope's original_max_position_embeddings L, 0 for
// the other rotaries. Transformers and vLLM turn a whole pass by the long
// factors once it reaches position L (every row, those below L included)
// and by the short ones otherwise, and the KV cache keeps each key as its
// pass turned it. A caller reproduces that per sequence: a pass of a
// sequence that reaches position L gives the device positions p+L (the
// long table), any other pass p.
func (r *RoPE) LongFrom() int { return r.longFrom }

func (r *RoPE) angle(pos, i int) (float32, float32) {
	switch {
	case r.longFrom == 0:
	case pos < r.longFrom:
		return tensor.RoPEAngle(pos, r.shortInv[i])
	default:
		pos -= r.longFrom
	}
	return tensor.RoPEAngle(pos, r.invFreq[i])
}

// On returns the rotation tables in dev's memory, for dev.RoPE.
func (r *RoPE) On(dev tensor.Device) (*tensor.Rotary, error) {
	half := r.dims / 2
	rt := &tensor.Rotary{HeadDim: r.headDim, MaxPos: r.maxPos, AttnFactor: r.factor}
	if r.dims != r.headDim {
		rt.Dims = r.dims
	}
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
