package optim

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newTestOpt(t *testing.T, seed uint64) (*AdamW, *rand.Rand) {
	r := rand.New(rand.NewPCG(seed, 1))
	mk := func(name string, n int) Param {
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(r.NormFloat64())
		}
		return param(name, data, make([]float32, n))
	}
	o, err := NewAdamW(testDev, []Param{mk("a", 5), mk("b.weight", 12)}, DefaultAdamW())
	if err != nil {
		t.Fatal(err)
	}
	return o, r
}

func stepRandom(o *AdamW, r *rand.Rand) {
	for _, p := range o.Params {
		g := host(p.Grad)
		for i := range g {
			g[i] = float32(r.NormFloat64())
		}
	}
	o.Step(1e-2)
}

// Saving after k steps, loading into a fresh optimiser and continuing gives
// bit-identical weights to never stopping.
func TestCheckpointResumeBitIdentical(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.safetensors")
	full, rf := newTestOpt(t, 3)
	for i := 0; i < 10; i++ {
		stepRandom(full, rf)
	}

	part, pcg := newTestOpt(t, 3)
	for i := 0; i < 4; i++ {
		stepRandom(part, pcg)
	}
	best := Param{Name: "best", Data: vec([]float32{1, 2, 3})}
	st := &TrainState{Epoch: 2, Cursor: 7, Offset: 11, Args: json.RawMessage(`{"lr":0.01}`), Extra: json.RawMessage(`{"best":1.5}`), RNG: []byte{1, 2, 3}, Buffers: []Param{best}}
	if err := SaveCheckpoint(path, part, st); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("temporary files left behind: %v", ents)
	}

	resumed, _ := newTestOpt(t, 99) // different initial weights: all must come from the file
	got := &TrainState{Buffers: []Param{{Name: "best", Data: vec(make([]float32, 3))}}}
	if err := LoadCheckpoint(path, resumed, got); err != nil {
		t.Fatal(err)
	}
	if resumed.StepCount != 4 || got.Epoch != 2 || got.Cursor != 7 || got.Offset != 11 || string(got.Args) != `{"lr":0.01}` ||
		string(got.Extra) != `{"best":1.5}` || string(got.RNG) != "\x01\x02\x03" || host(got.Buffers[0].Data)[2] != 3 {
		t.Fatalf("state not restored: step %d %+v", resumed.StepCount, got)
	}
	// Continue with the same gradient stream as the uninterrupted run.
	for i := 0; i < 6; i++ {
		stepRandom(resumed, pcg)
	}
	for i, p := range full.Params {
		a, b := host(p.Data), host(resumed.Params[i].Data)
		for j := range a {
			if a[j] != b[j] {
				t.Fatalf("%s[%d]: uninterrupted %v resumed %v", p.Name, j, a[j], b[j])
			}
		}
	}
}

func TestLoadCheckpointRejectsMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.safetensors")
	o, _ := newTestOpt(t, 1)
	if err := SaveCheckpoint(path, o, &TrainState{}); err != nil {
		t.Fatal(err)
	}
	other, err := NewAdamW(testDev, []Param{param("a", make([]float32, 6), make([]float32, 6))}, DefaultAdamW())
	if err != nil {
		t.Fatal(err)
	}
	err = LoadCheckpoint(path, other, &TrainState{})
	if err == nil || !strings.Contains(err.Error(), `"param/a"`) {
		t.Fatalf("size mismatch not reported: %v", err)
	}
	fewer, _ := NewAdamW(testDev, []Param{param("a", make([]float32, 5), make([]float32, 5))}, DefaultAdamW())
	err = LoadCheckpoint(path, fewer, &TrainState{})
	if err == nil || !strings.Contains(err.Error(), "b.weight") {
		t.Fatalf("extra tensor not reported: %v", err)
	}
}
