package cpu

import "github.com/drafter-ai/drafter/pkg/tensor"

// RotateHalf applies rotate_half RoPE with sign +1 (forward) or -1 (its
// transpose, the backward) in place to x [rows, heads·hd]: within each head
// of hd values, value i < d/2 pairs with value i+d/2, d = 2·len(invFreq) <=
// hd, and turns by the angle of row r's position pos[r]; values d..hd-1 are
// left as they are (a partial rotary). cos and sin are the tables
// [maxPos, d/2] of RoPEAngle; positions from maxPos on are computed. Every
// cos and sin is multiplied by factor (a rotary's attention factor) unless
// factor is 1.
func RotateHalf(x []float32, rows, heads, hd int, pos []int32, cos, sin, invFreq []float32, maxPos int, factor, sign float32) {
	half := len(invFreq)
	d := 2 * half
	width := heads * hd
	scaled := factor != 1
	for row := 0; row < rows; row++ {
		p := int(pos[row])
		var cs, sn []float32
		if p < maxPos {
			cs, sn = cos[p*half:p*half+half], sin[p*half:p*half+half]
		}
		xr := x[row*width : row*width+width]
		for h := 0; h < heads; h++ {
			v := xr[h*hd : h*hd+d]
			lo, hi := v[:half], v[half:d]
			for i := 0; i < half; i++ {
				var c, s float32
				if cs != nil {
					c, s = cs[i], sn[i]
				} else {
					c, s = tensor.RoPEAngle(p, invFreq[i])
				}
				if scaled {
					c, s = c*factor, s*factor
				}
				s *= sign
				a, b := lo[i], hi[i]
				lo[i] = a*c - b*s
				hi[i] = b*c + a*s
			}
		}
	}
}

// rotate runs RotateHalf with sign over x's rows for the rotary r, after
// checking r's sizes against x's heads.
func rotate(op string, x tensor.Tensor, heads int, pos tensor.Tensor, r *tensor.Rotary, sign float32) {
	r.Check(op)
	half := r.RotDims() / 2
	RotateHalf(f32s(x), x.Rows(), heads, r.HeadDim, i32s(pos), f32s(r.Cos), f32s(r.Sin), f32s(r.InvFreq)[:half], r.MaxPos, r.Factor(), sign)
}
