package cuda

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// graphStep is a pass of the kind a decode step is: host values (a row of
// floats, a position in a KV cache) reach the device through Write and
// KVWrite, then kernels (RMSNorm, Add, Attend) compute from them.
type graphStep struct {
	d        *Device
	x, y, w  tensor.Tensor
	q, o     tensor.Tensor
	kv       *tensor.KV
	host     []float32
	pos      int
	extraAdd bool // issue one op more (a pass unlike its capture)
}

func (s *graphStep) run() {
	d := s.d
	d.Write(s.x, s.host)
	d.RMSNorm(s.y, s.x, s.w, 1e-5)
	d.Add(s.y, s.x)
	if s.extraAdd {
		d.Add(s.y, s.x)
	}
	d.KVWrite(s.kv, 0, s.pos, s.y, s.x)
	shape := tensor.AttnShape{Heads: 2, KVHeads: 1, HeadDim: 8}
	d.Scale(s.q, 0.5)
	d.Attend(s.o, s.q, 0, shape, []tensor.AttnSeq{{KV: s.kv, Row0: 0, T: 1, N: s.pos}})
}

func newGraphStep(t *testing.T, d *Device) *graphStep {
	r := rand.New(rand.NewPCG(7, 7))
	s := &graphStep{d: d, host: make([]float32, 8)}
	s.x = devTensor(t, d, randVals(r, 8, 1), 1, 8)
	s.y = devTensor(t, d, randVals(r, 8, 1), 1, 8)
	s.w = devTensor(t, d, randVals(r, 8, 1), 1, 8)
	s.q = devTensor(t, d, randVals(r, 16, 1), 1, 16)
	s.o = devTensor(t, d, randVals(r, 16, 1), 1, 16)
	kv, err := d.NewKV(1, 8, 600) // three chunks of attChunk positions
	if err != nil {
		t.Fatal(err)
	}
	s.kv = kv
	return s
}

// TestGraphReplayMatchesPlain: a pass captured once and replayed for later
// steps (new host values, a growing context that crosses Attend's chunks)
// gives bit for bit what the same pass gives run plainly, and the replays
// are counted as such.
func TestGraphReplayMatchesPlain(t *testing.T) {
	d := openTest(t)
	if off := d.GraphsOff(); off != "" {
		t.Fatalf("the stand-in driver has CUDA graphs, but: %s", off)
	}
	const steps = 300
	outputs := func(graphs bool) [][]float32 {
		s := newGraphStep(t, d)
		d.SetGraphs(graphs)
		r := rand.New(rand.NewPCG(1, 2))
		var outs [][]float32
		key := tensor.GraphKey{Rows: 1, Layout: 1}
		for i := 0; i < steps; i++ {
			copy(s.host, randVals(r, 8, 2))
			s.pos = i
			ran := d.RunGraph(key, s.run)
			if ran != graphs {
				t.Fatalf("step %d: RunGraph ran as a graph: %v, want %v (stats %+v)", i, ran, graphs, d.GraphStats())
			}
			outs = append(outs, append(readAll(d, s.o), readAll(d, s.y)...))
		}
		return outs
	}
	plain := outputs(false)
	before := d.GraphStats()
	graph := outputs(true)
	st := d.GraphStats()
	if st.Captures-before.Captures != 1 || st.Replays-before.Replays != steps-1 || st.Mismatches != 0 {
		t.Fatalf("graph stats %+v after %+v: want 1 capture and %d replays", st, before, steps-1)
	}
	for i := range plain {
		for j := range plain[i] {
			if math.Float32bits(plain[i][j]) != math.Float32bits(graph[i][j]) {
				t.Fatalf("step %d value %d: graph %v, plain %v", i, j, graph[i][j], plain[i][j])
			}
		}
	}
}

// TestGraphMismatchRunsPlain: a pass of a captured key that issues other
// ops than the capture runs plainly (its result is the plain one) and the
// key is captured again.
func TestGraphMismatchRunsPlain(t *testing.T) {
	d := openTest(t)
	s := newGraphStep(t, d)
	key := tensor.GraphKey{Rows: 1, Layout: 2}
	copy(s.host, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	if !d.RunGraph(key, s.run) {
		t.Fatalf("first pass not captured: %+v", d.GraphStats())
	}
	s.extraAdd, s.pos = true, 1
	if d.RunGraph(key, s.run) {
		t.Fatal("a pass unlike its capture was replayed")
	}
	got := readAll(d, s.y)
	d.SetGraphs(false)
	s.pos = 2
	s.run()
	want := readAll(d, s.y)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("value %d: %v after the mismatched pass, %v plainly", i, got[i], want[i])
		}
	}
	d.SetGraphs(true)
	if st := d.GraphStats(); st.Mismatches != 1 {
		t.Fatalf("stats %+v: want 1 mismatch", st)
	}
	s.pos = 3
	if !d.RunGraph(key, s.run) || d.GraphStats().Captures != 2 {
		t.Fatalf("the key was not captured again: %+v", d.GraphStats())
	}
}

// TestGraphByValueMismatch: a value passed to a kernel by value that
// changes from one pass to the next (what a graph cannot replay) is caught
// by the comparison with the capture: the pass runs plainly, with its own
// value.
func TestGraphByValueMismatch(t *testing.T) {
	d := openTest(t)
	x := devTensor(t, d, []float32{1, 2}, 1, 2)
	factor := float32(2)
	pass := func() { d.Scale(x, factor) }
	key := tensor.GraphKey{Layout: 3}
	if !d.RunGraph(key, pass) {
		t.Fatal("not captured")
	}
	factor = 5
	if d.RunGraph(key, pass) {
		t.Fatal("a pass whose kernel argument changed was replayed")
	}
	if got := readAll(d, x); got[0] != 10 || got[1] != 20 || d.GraphStats().Mismatches != 1 {
		t.Fatalf("x = %v (want [10 20]), stats %+v", got, d.GraphStats())
	}
}

// TestGraphIllegalOps: a pass that reads to the host, or that makes a call
// a capture forbids (here a synchronize that only the capture's run
// makes), is not graphed: the stand-in driver refuses the call inside the
// capture with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED as a GPU's driver
// does, the capture is dropped and the pass runs plainly.
func TestGraphIllegalOps(t *testing.T) {
	d := openTest(t)
	x := devTensor(t, d, []float32{1, 2, 3, 4}, 1, 4)
	buf := make([]float32, 4)
	read := func() {
		d.Scale(x, 2)
		d.Read(buf, x)
	}
	if d.RunGraph(tensor.GraphKey{Layout: 10}, read) {
		t.Fatal("a pass reading to the host ran as a graph")
	}
	st := d.GraphStats()
	if st.Plain != 1 || !strings.Contains(st.PlainWhy, "reads device memory to the host") {
		t.Fatalf("stats %+v", st)
	}
	if buf[0] != 2 || buf[3] != 8 {
		t.Fatalf("the plain run read %v, want [2 4 6 8]", buf)
	}

	d2 := openTest(t)
	x2 := devTensor(t, d2, []float32{1, 2, 3, 4}, 1, 4)
	calls := 0
	syncInCapture := func() {
		calls++
		d2.Scale(x2, 2)
		if calls == 2 { // the capture's run (the first is the dry run)
			d2.Sync()
		}
	}
	if d2.RunGraph(tensor.GraphKey{Layout: 11}, syncInCapture) {
		t.Fatal("a pass synchronizing in its capture ran as a graph")
	}
	st = d2.GraphStats()
	if calls != 3 || !strings.Contains(st.PlainWhy, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED") {
		t.Fatalf("%d runs, stats %+v: want the capture refused by the driver, then a plain run", calls, st)
	}
	d2.Read(buf, x2)
	if buf[0] != 2 || buf[3] != 8 { // scaled once: by the plain run only
		t.Fatalf("x = %v after the fallback, want [2 4 6 8]", buf)
	}

	// At the driver: what a capture forbids fails and invalidates it.
	drv := d.sh.drv
	if err := drv.beginCapture(); err != nil {
		t.Fatal(err)
	}
	_, aerr := drv.alloc(256)
	g, eerr := drv.endCapture()
	if aerr == nil || !strings.Contains(aerr.Error(), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED") || g != 0 ||
		eerr == nil || !strings.Contains(eerr.Error(), "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED") {
		t.Fatalf("alloc in a capture: %v; end: graph %d, %v", aerr, g, eerr)
	}
}

// TestGraphsOff: SetGraphs(false) runs every pass plainly, and counts it.
func TestGraphsOff(t *testing.T) {
	d := openTest(t)
	d.SetGraphs(false)
	x := devTensor(t, d, []float32{1, 2}, 1, 2)
	if d.RunGraph(tensor.GraphKey{}, func() { d.Scale(x, 3) }) {
		t.Fatal("ran as a graph with graphs off")
	}
	if got := readAll(d, x); got[1] != 6 || d.GraphStats().Plain != 1 {
		t.Fatalf("x = %v, stats %+v", got, d.GraphStats())
	}
}

// TestGraphReplayNoAllocs: a replayed step allocates nothing on the host
// (staging, comparing and launching reuse the graph's buffers).
func TestGraphReplayNoAllocs(t *testing.T) {
	d := openTest(t)
	s := newGraphStep(t, d)
	run := s.run
	key := tensor.GraphKey{Layout: 4}
	if !d.RunGraph(key, run) {
		t.Fatal("not captured")
	}
	allocs := testing.AllocsPerRun(20, func() {
		s.pos = (s.pos + 1) % 500
		if !d.RunGraph(key, run) {
			t.Fatal("not replayed")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per replayed step", allocs)
	}
}

// TestGraphsEnvOff: DRAFTER_CUDA_GRAPHS=0 opens the device without graphs,
// saying why, and its passes run plainly.
func TestGraphsEnvOff(t *testing.T) {
	t.Setenv(graphsEnv, "0")
	d := openTest(t)
	if d.GraphsOff() != "DRAFTER_CUDA_GRAPHS=0" {
		t.Fatalf("GraphsOff %q", d.GraphsOff())
	}
	x := devTensor(t, d, []float32{1, 2}, 1, 2)
	if d.RunGraph(tensor.GraphKey{}, func() { d.Scale(x, 3) }) {
		t.Fatal("ran as a graph with DRAFTER_CUDA_GRAPHS=0")
	}
	if got := readAll(d, x); got[1] != 6 || d.GraphStats().PlainWhy != "DRAFTER_CUDA_GRAPHS=0" {
		t.Fatalf("x = %v, stats %+v", got, d.GraphStats())
	}
}
