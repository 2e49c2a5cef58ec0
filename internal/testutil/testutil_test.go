package testutil

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestChiSquareP(t *testing.T) {
	for _, c := range []struct {
		counts []int
		probs  []float64
		p      float64
		df     int
	}{
		{[]int{50, 50}, []float64{0.5, 0.5}, 1, 1},
		// (60-50)²/50 + (40-50)²/50 = 4 on one degree of freedom.
		{[]int{60, 40}, []float64{0.5, 0.5}, 0.04550026389635842, 1},
		// The two cells expecting 1 draw each are pooled: 0 + (46-48)²/48 +
		// (4-2)²/2 = 25/12 on two degrees of freedom, whose survival is
		// exp(-x/2).
		{[]int{50, 46, 3, 1}, []float64{0.5, 0.48, 0.01, 0.01}, math.Exp(-25.0 / 24), 2},
		// A cell of probability 0 drawn fails; never drawn, it is no cell.
		{[]int{50, 49, 1}, []float64{0.5, 0.5, 0}, 0, 1},
		{[]int{50, 50, 0}, []float64{0.5, 0.5, 0}, 1, 1},
		{[]int{100}, []float64{1}, 1, 0},
	} {
		p, df := ChiSquareP(c.counts, c.probs, 100)
		if math.Abs(p-c.p) > 1e-12 || (c.p != 0 && df != c.df) {
			t.Errorf("ChiSquareP(%v, %v) = %v, %d; want %v, %d", c.counts, c.probs, p, df, c.p, c.df)
		}
	}
}

func TestRandomTree(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	roots, nodes := 0, 0
	for range 200 {
		p := RandomTree(r, 12)
		for i, v := range p {
			if v < -1 || v >= i {
				t.Fatalf("node %d has parent %d: %v", i, v, p)
			}
			if v == -1 {
				roots++
			}
			nodes++
		}
	}
	if roots == 0 || roots == nodes {
		t.Fatalf("%d roots in %d nodes: want several roots and branches", roots, nodes)
	}
}

func TestPaths(t *testing.T) {
	if _, err := os.Stat(filepath.Join(Root(), "go.mod")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(Stories260k(), "config.json")); err != nil {
		t.Fatal(err)
	}
	if got, want := SharedPath("x"), filepath.Join(Root(), "..", "shared", "x"); got != want {
		t.Fatalf("SharedPath(x) = %s, want %s", got, want)
	}
}

func TestWantErr(t *testing.T) {
	WantErr(t, errors.New("config.json: hidden_size 0"), "config.json", "hidden_size")
}

func TestProcessCPU(t *testing.T) {
	c0 := ProcessCPU()
	x := 0.0
	for i := range 20_000_000 {
		x += math.Sqrt(float64(i))
	}
	if c1 := ProcessCPU(); c1 < c0 || x == 0 {
		t.Fatalf("CPU time went from %v to %v", c0, c1)
	}
}

func TestCopyDir(t *testing.T) {
	dir := CopyDir(t, Stories260k())
	for _, name := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
		a, err := os.ReadFile(filepath.Join(Stories260k(), name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(a) != string(b) {
			t.Fatalf("%s: copy differs (%v)", name, err)
		}
	}
}

func TestReferences(t *testing.T) {
	// [1 2; 3 4] times [5 6; 7 8]ᵀ, times 2, plus C.
	want, tol := GemmRef(false, true, 2, 2, 2, 2, []float32{1, 2, 3, 4}, 2, []float32{5, 6, 7, 8}, 2, 1, []float32{1, 1, 1, 1}, 2)
	if w := []float64{35, 47, 79, 107}; !slices.Equal(want, w) || tol[3] <= 0 || tol[3] > 1e-4 {
		t.Fatalf("GemmRef = %v (tol %v), want %v", want, tol, w)
	}
	ls := LogSoftmax([]float64{1, 2, 3})
	var s float64
	for _, v := range ls {
		s += math.Exp(v)
	}
	if math.Abs(s-1) > 1e-15 || ls[2]-ls[1] != 1 {
		t.Fatalf("LogSoftmax = %v", ls)
	}
	a := RandNormal(rand.New(rand.NewPCG(1, 1)), 3, 2)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range a {
		if a[i] != float32(2*r.NormFloat64()) {
			t.Fatalf("RandNormal = %v", a)
		}
	}
}

func TestEditJSON(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(`{"a": 1, "b": {"c": "x"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	EditJSON(t, p, func(m map[string]any) { m["a"] = 2; delete(m, "b") })
	if m := ReadJSON(t, p); len(m) != 1 || m["a"] != 2.0 {
		t.Fatalf("after the edit: %v", m)
	}
}
