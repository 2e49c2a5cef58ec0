package cpu

import "github.com/drafter-ai/drafter/pkg/tensor"

// RotateHalf applies rotate_half RoPE with sign +1 (forward) or -1 (its
// transpose, the backward) in place to x [rows, heads·d], d = 2·len(invFreq):
// within each head, value i < d/2 pairs with value i+d/2 and turns by the
// angle of row r's position pos[r]. cos and sin are the tables
// [maxPos, d/2] of RoPEAngle; positions from maxPos on are computed.
func RotateHalf(x []float32, rows, heads int, pos []int32, cos, sin, invFreq []float32, maxPos int, sign float32) {
	half := len(invFreq)
	d := 2 * half
	width := heads * d
	for row := 0; row < rows; row++ {
		p := int(pos[row])
		var cs, sn []float32
		if p < maxPos {
			cs, sn = cos[p*half:p*half+half], sin[p*half:p*half+half]
		}
		xr := x[row*width : row*width+width]
		for h := 0; h < heads; h++ {
			v := xr[h*d : h*d+d]
			lo, hi := v[:half], v[half:d]
			for i := 0; i < half; i++ {
				var c, s float32
				if cs != nil {
					c, s = cs[i], sn[i]
				} else {
					c, s = tensor.RoPEAngle(p, invFreq[i])
				}
				s *= sign
				a, b := lo[i], hi[i]
				lo[i] = a*c - b*s
				hi[i] = b*c + a*s
			}
		}
	}
}
