package tensortest

import (
	"fmt"
	"math"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The checks of the ops that gpt-oss targets add: attention sinks
// (AttnShape.Sinks) and the experts' clamped SwiGLU, each against a float64
// reference written from Hugging Face's definitions, not from a device's
// code.

// sinkLogits are the sinks of attendSinks' heads (cycled over the heads): a
// sink that takes most of a row's weight, ones near the scores, one far
// below them (as good as none) and a negative one in between.
var sinkLogits = []float32{6, -0.4, 1.3, -40, -2.5, 0.9}

// attnSinks returns a [1, heads] tensor of sinkLogits, cycled.
func (e *env) attnSinks(heads int) tensor.Tensor {
	v := make([]float32, heads)
	for h := range v {
		v[h] = sinkLogits[h%len(sinkLogits)]
	}
	return e.tensor(v, 1, heads)
}

// attendSinks checks Attend with sinks against attendCheck's float64
// reference (the sink one more score of each row's softmax, without a
// value), alone and with windows and softcaps, over attendWindow's calls
// (decode rows over contexts a GPU splits into several chunks, chains of
// more than 64 rows for the CPU's backend path and a GPU's tiled one,
// trees with and without pending nodes), for heads a GPU tiles and heads
// too wide for its tiles; and that a sinks tensor of the wrong shape
// panics, as sinks do in AttendTTT.
func attendSinks(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 36)
	for _, sh := range []struct {
		window  int
		softcap float32
	}{{0, 0}, {0, 0.75}, {5, 0}, {37, 0.75}, {300, 2}} {
		shape := tensor.AttnShape{Heads: 6, KVHeads: 2, HeadDim: 16, Window: sh.window, Softcap: sh.softcap, Sinks: e.attnSinks(6)}
		for k, cs := range windowCaseSets() {
			attendCheck(e, shape, cs, fmt.Sprintf("Attend sinks window %d softcap %v case %d", sh.window, sh.softcap, k))
		}
	}
	wide := tensor.AttnShape{Heads: 2, KVHeads: 1, HeadDim: 160, Window: 0, Sinks: e.attnSinks(2)}
	for k, cs := range [][]windowCase{{{n: 600, t: 1}, {n: 5, t: 70}}, {{n: 30, t: 5, parents: []int{-1, 0, 1, 1, 0}}}} {
		attendCheck(e, wide, cs, fmt.Sprintf("Attend sinks, heads 160 wide, case %d", k))
		wide.Window = 50
		attendCheck(e, wide, cs, fmt.Sprintf("Attend sinks, heads 160 wide, window 50, case %d", k))
		wide.Window = 0
	}
	// Heads past the CUDA row kernel's width (drafter_attend_wide): a
	// one-block row folds the sink in itself, a chunked one in the merge.
	latent := tensor.AttnShape{Heads: 2, KVHeads: 1, HeadDim: 576, Sinks: e.attnSinks(2)}
	for k, cs := range [][]windowCase{{{n: 300, t: 1}, {n: 7, t: 1}}, {{n: 12, t: 4, parents: []int{-1, 0, 1, 0}}}} {
		attendCheck(e, latent, cs, fmt.Sprintf("Attend sinks, heads 576 wide, case %d", k))
	}

	kv, err := dev.NewKV(1, 32, 4)
	if err != nil {
		t.Fatal(err)
	}
	q := e.tensor(e.rand(64, 1), 1, 64)
	bf, _ := dev.Alloc(tensor.BF16, 1, 4)
	for _, c := range []struct {
		name  string
		sinks tensor.Tensor
	}{{"3 sinks for 4 heads", e.attnSinks(3)}, {"a [4, 1] sinks", e.tensor(make([]float32, 4), 4, 1)}, {"bfloat16 sinks", bf}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("Attend with %s did not panic", c.name)
				}
			}()
			dev.Attend(q, q, 0, tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 16, Sinks: c.sinks}, []tensor.AttnSeq{{KV: kv, T: 1, N: 2}})
		}()
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("AttendTTT with sinks did not panic")
			}
		}()
		x := e.tensor(e.rand(2*64, 1), 2, 64)
		k := e.tensor(e.rand(2*32, 1), 2, 32)
		lse, _ := dev.Alloc(tensor.F32, 2, 4)
		shape := tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 16, Sinks: e.attnSinks(4)}
		dev.AttendTTT(x, lse, x, []tensor.Tensor{k}, []tensor.Tensor{k}, shape, []tensor.Span{{Start: 0, N: 2}})
	}()
}

// attendSinksBits checks the decode-versus-draft property of
// attendWindowBits with sinks set, alone and with windows and softcaps:
// the sink enters a row's softmax once however its keys are split, so a
// draft node still gets its decode step's bits.
func attendSinksBits(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 37)
	for _, sh := range []struct {
		window  int
		softcap float32
	}{{0, 0}, {200, 0.75}, {3, 1.5}, {1000, 0}} {
		shape := tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 16, Window: sh.window, Softcap: sh.softcap, Sinks: e.attnSinks(4)}
		attendBits(e, shape, fmt.Sprintf("sinks, window %d softcap %v", sh.window, sh.softcap))
	}
}

// clampedSwiGLU64 is gpt-oss's clamped SwiGLU in float64: (u+1)·g·σ(α·g),
// g = min(gate, limit), u = up clamped to [-limit, limit].
func clampedSwiGLU64(gate, up, alpha, limit float64) float64 {
	g := math.Min(gate, limit)
	u := math.Max(math.Min(up, limit), -limit)
	return (u + 1) * g / (1 + math.Exp(-alpha*g))
}

// clampedSwiGLU checks ClampedSwiGLU against its float64 definition with
// gate and up values beyond ±limit on both sides (and gates far enough
// below 0 that the sigmoid underflows), separate, fused (bit for bit as
// separate) and in place, inline and split over a device's workers.
func clampedSwiGLU(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 38)
	const alpha, limit = 1.702, 7.0
	for _, shape := range [][2]int{{3, 7}, {70, 500}} {
		rows, I := shape[0], shape[1]
		gv, uv := e.rand(rows*I, 8), e.rand(rows*I, 8)
		copy(gv, []float32{-200, 200, limit, -limit, 7.5, -7.5, 0})
		copy(uv, []float32{-200, 200, -limit, limit, -7.5, 7.5, -1})
		beyond := [4]int{}
		for i := range gv {
			if gv[i] > limit {
				beyond[0]++
			}
			if gv[i] < -limit {
				beyond[1]++
			}
			if uv[i] > limit {
				beyond[2]++
			}
			if uv[i] < -limit {
				beyond[3]++
			}
		}
		if beyond[0] == 0 || beyond[1] == 0 || beyond[2] == 0 || beyond[3] == 0 {
			t.Fatalf("ClampedSwiGLU's inputs do not pass ±limit on every side: %v", beyond)
		}
		gate, up := e.tensor(gv, rows, I), e.tensor(uv, rows, I)
		out, _ := dev.Alloc(tensor.F32, rows, I)
		dev.ClampedSwiGLU(out, gate, up, alpha, limit)
		want := make([]float64, rows*I)
		for i, g := range gv {
			want[i] = clampedSwiGLU64(float64(g), float64(uv[i]), float64(float32(alpha)), float64(float32(limit)))
		}
		sep := e.read(out)
		e.near(fmt.Sprintf("ClampedSwiGLU %dx%d", rows, I), sep, want, nil)
		fv := make([]float32, 0, 2*rows*I)
		for r := 0; r < rows; r++ {
			fv = append(fv, gv[r*I:(r+1)*I]...)
			fv = append(fv, uv[r*I:(r+1)*I]...)
		}
		fused := e.tensor(fv, rows, 2*I)
		out2, _ := dev.Alloc(tensor.F32, rows, I)
		dev.ClampedSwiGLU(out2, fused, tensor.Tensor{}, alpha, limit)
		e.same("ClampedSwiGLU fused", e.read(out2), sep)
		dev.ClampedSwiGLU(gate, gate, up, alpha, limit)
		e.same("ClampedSwiGLU into gate", e.read(gate), sep)
	}
}

// gptOSSAllocs checks that Attend with sinks (over a decode row, a short
// chain, a long chain and a tree, with a window) and ClampedSwiGLU allocate
// nothing per call once their scratch has grown.
func gptOSSAllocs(t *testing.T, dev tensor.Device) {
	e := newEnv(t, dev, 39)
	shape := tensor.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 16, Sinks: e.attnSinks(4)}
	q, out, seqs := e.allocAttendCases(shape, 600, 500, 300)
	gate, up := e.tensor(e.rand(3*40, 8), 3, 40), e.tensor(e.rand(3*40, 8), 3, 40)
	fused := e.tensor(e.rand(3*80, 8), 3, 80)
	act, _ := dev.Alloc(tensor.F32, 3, 40)
	run := func() {
		for _, w := range []int{0, 7} {
			shape.Window = w
			for _, s := range seqs {
				dev.Attend(out, q, 0, shape, s)
			}
		}
		dev.ClampedSwiGLU(act, gate, up, 1.702, 7)
		dev.ClampedSwiGLU(act, fused, tensor.Tensor{}, 1.702, 7)
	}
	run() // grow the scratch
	if a := testing.AllocsPerRun(5, run); a != 0 {
		t.Fatalf("%v allocations per run of Attend with sinks and ClampedSwiGLU, want 0", a)
	}
}
