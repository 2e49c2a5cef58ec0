package cuda

import (
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// CUDA graphs (tensor.Grapher): a pass of device ops (a decode step, a
// verification pass) is captured once per shape (tensor.GraphKey) with
// stream capture and replayed with cuGraphLaunch, so that a step costs the
// host one copy and one launch instead of a launch per op.
//
// A captured kernel reads its arguments as they were at the capture, so
// every value that changes from one step to the next must reach it through
// device memory. The ops already stage their per-call host values (token
// ids, positions, Attend's tables of sequences, rows and masks, the rows
// that get logits) with toDevice; in a graph pass those values go into the
// graph's staging buffer, pinned host memory copied to its device twin in
// one copy before each launch, and toDevice becomes a device-to-device copy
// node from there. Attend reads its tables from the staging buffer directly
// and sizes its launch for the cache's capacity instead of the context's
// length; KVWrite becomes drafter_core_kv_write, which reads the rows it
// writes from the staging buffer.
//
// Each pass of a key runs the pass function again (the Go side of the ops:
// shapes, staging) without launching anything, checking that it issues the
// very ops the capture recorded (kernels, launch shapes, arguments, copies,
// GEMMs); only then is the graph launched. A pass that differs, or that
// needs the host mid-pass (a read to the host, an allocation, a
// synchronize), runs plainly: the capture's first run (graphDry) settles
// every allocation and finds reads to the host before anything is
// captured, and what still reaches the driver during the capture fails
// there (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and leaves the key plain.

// graphMode is what a graph pass does with the ops it issues.
type graphMode int

const (
	// graphDry issues nothing: it settles the scratch sizes, uploads the
	// weights and sizes the staging buffer before a capture.
	graphDry graphMode = iota + 1
	// graphCapture records the ops (the driver captures them too).
	graphCapture
	// graphReplay stages the values and compares the ops with the
	// capture's, issuing nothing.
	graphReplay
)

// callKind is a driver call that a capture forbids or that must not happen
// in a graph pass.
type callKind int

const (
	callAlloc callKind = iota + 1 // cuMemAlloc, cuMemFree, pinning host memory
	callSync                      // waiting for the stream
	callHtoD                      // a copy from pageable host memory
	callDtoH                      // a read to the host
)

func (k callKind) String() string {
	switch k {
	case callAlloc:
		return "an allocation"
	case callSync:
		return "a synchronize"
	case callHtoD:
		return "a copy from the host"
	}
	return "a read to the host"
}

// opKind is a recorded op's kind.
type opKind uint8

const (
	opKernel opKind = iota + 1
	opDtoD
	opMemset
	opGemm
)

// graphOp is one op of a graph pass: a kernel (function, launch shape and
// arguments) or a copy, memset or GEMM (its arguments).
type graphOp struct {
	kind        opKind
	fn          uintptr
	grid, block dim3
	shared      int
	n           int
	args        [maxArgs]uint64
}

// same reports whether o and p are the same op.
func (o *graphOp) same(p *graphOp) bool {
	if o.kind != p.kind || o.fn != p.fn || o.grid != p.grid || o.block != p.block || o.shared != p.shared || o.n != p.n {
		return false
	}
	for i := 0; i < o.n; i++ {
		if o.args[i] != p.args[i] {
			return false
		}
	}
	return true
}

// gemmOp is the record of a GEMM (batch 0: a cublasGemmEx).
func gemmOp(ta, tb bool, m, n, k int, alpha float32, a uint64, atype, lda int, sa int64, b uint64, btype, ldb int, sb int64, beta float32, c uint64, ldc int, sc int64, batch int) graphOp {
	flag := func(t bool) uint64 {
		if t {
			return 1
		}
		return 0
	}
	return graphOp{kind: opGemm, n: 19, args: [maxArgs]uint64{flag(ta), flag(tb), uint64(m), uint64(n), uint64(k),
		uint64(math.Float32bits(alpha)), a, uint64(atype), uint64(lda), uint64(sa), b, uint64(btype), uint64(ldb), uint64(sb),
		uint64(math.Float32bits(beta)), c, uint64(ldc), uint64(sc), uint64(batch)}}
}

// kernelOp is the record of a launch of k with the arguments of a.
func kernelOp(k *kernel, grid, block dim3, shared int, a *argBuf) graphOp {
	op := graphOp{kind: opKernel, fn: k.fn, grid: grid, block: block, shared: shared, n: a.n}
	copy(op.args[:a.n], a.vals[:a.n])
	return op
}

// graphAbort is the panic that stops a graph pass which cannot be graphed:
// RunGraph recovers it and runs the pass plainly.
type graphAbort struct{ why string }

// devGraph is one captured pass: the executable graph, the ops it holds
// and its staging buffer (pinned host memory and its device twin).
type devGraph struct {
	graph, exec uintptr
	ops         []graphOp
	host        unsafe.Pointer
	dev         uint64
	size        int
}

// graphRun is a graph pass in progress (the driver's gr while it runs).
type graphRun struct {
	mode graphMode
	dev  *Device // the device value running the pass
	g    *devGraph
	ops  []graphOp // graphCapture: the ops issued
	at   int       // graphReplay: the next op to compare
	diff string    // graphReplay: the first difference from the capture
	off  int       // the staging bytes used
}

// guard is the driver's check of a call that a graph pass must not make:
// a dry pass may allocate, synchronize and upload (what it settles before
// the capture) but not read to the host; a replayed pass may do none of
// it; in a capture the driver itself refuses what a capture forbids.
func (r *graphRun) guard(k callKind) {
	if r == nil {
		return
	}
	switch r.mode {
	case graphDry:
		if k == callDtoH {
			panic(graphAbort{"the pass reads device memory to the host"})
		}
	case graphReplay:
		panic(graphAbort{"the pass makes " + k.String() + " after its capture"})
	}
}

// record takes an op the pass issues and reports whether to issue it to the
// driver (only in a capture).
func (r *graphRun) record(op graphOp) bool {
	switch r.mode {
	case graphDry:
		return false
	case graphCapture:
		r.ops = append(r.ops, op)
		return true
	}
	if r.diff == "" {
		if r.at >= len(r.g.ops) {
			r.diff = fmt.Sprintf("op %d: the pass issues more ops than its capture's %d", r.at, len(r.g.ops))
		} else if c := &r.g.ops[r.at]; !c.same(&op) {
			r.diff = describeDiff(r.at, &op, c)
		}
	}
	r.at++
	return false
}

// describeDiff says how op, the at'th of a replayed pass, differs from the
// captured c (apart from record, so that op stays on record's stack).
func describeDiff(at int, op, c *graphOp) string {
	got, want := *op, *c
	return fmt.Sprintf("op %d (kind %d) differs from the capture's: %v %v %d %v, captured %v %v %d %v",
		at, got.kind, got.grid, got.block, got.shared, got.args[:got.n], want.grid, want.block, want.shared, want.args[:want.n])
}

// stage copies n bytes at src into the staging buffer and returns their
// device address there (in a dry pass, only their offset: nothing runs).
func (r *graphRun) stage(src unsafe.Pointer, n int) uint64 {
	off := r.off
	r.off = (off + n + 15) &^ 15
	if r.mode == graphDry {
		return uint64(off)
	}
	if r.off > r.g.size {
		if r.diff == "" {
			r.diff = "the pass stages more than its capture"
		}
		return r.g.dev
	}
	if n > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Add(r.g.host, off)), n), unsafe.Slice((*byte)(src), n))
	}
	return r.g.dev + uint64(off)
}

// GraphStats counts a device's graph passes (all its values together).
type GraphStats struct {
	// Captures is the passes captured (each also ran as its graph),
	// Replays the passes replayed from a capture.
	Captures, Replays int
	// Mismatches is the passes of a captured key that issued other ops
	// than the capture (they ran plainly and the key is captured again),
	// MismatchWhy the last one's difference.
	Mismatches  int
	MismatchWhy string
	// Plain is the passes run plainly because their key cannot be graphed
	// (PlainWhy says why, for the first such key), or graphs are off.
	Plain    int
	PlainWhy string
}

// graphState is a device value's graphs: they hold its scratch's
// addresses, so each value captures its own.
type graphState struct {
	graphs map[tensor.GraphKey]*devGraph
	plain  map[tensor.GraphKey]bool
	run    graphRun
}

// sharedGraphs is what a device's values share about graphs: the switch
// and the counts (siblings may run on several goroutines).
type sharedGraphs struct {
	off   atomic.Bool // SetGraphs(false)
	mu    sync.Mutex
	stats GraphStats
}

// count adds one pass to the device's counts.
func (g *sharedGraphs) count(add func(*GraphStats)) {
	g.mu.Lock()
	add(&g.stats)
	g.mu.Unlock()
}

// maxGraphs bounds the graphs a device value keeps (each holds its
// staging buffer): the passes of a shape beyond them run plainly.
const maxGraphs = 64

// graphsEnv is the environment variable that turns CUDA graphs off ("0").
const graphsEnv = "DRAFTER_CUDA_GRAPHS"

// startGraphs readies the device for graphs at Open, or records why it
// cannot have them: DRAFTER_CUDA_GRAPHS=0, or a driver or cuBLAS without
// the entry points. cuBLAS gets its workspace here, for plain and graph
// passes alike, so that both choose the same GEMM algorithms.
func (sh *shared) startGraphs() {
	if os.Getenv(graphsEnv) == "0" {
		sh.graphsOff = graphsEnv + "=0"
		return
	}
	if err := sh.drv.loadGraphs(); err != nil {
		sh.graphsOff = err.Error()
		return
	}
	// cuBLAS's own default: 32 MiB on Hopper and later, 4 MiB before.
	ws := 4 << 20
	if sh.info.Major >= 9 {
		ws = 32 << 20
	}
	p, err := sh.drv.alloc(ws)
	if err == nil {
		sh.blocks = append(sh.blocks, p)
		err = sh.drv.setWorkspace(p, ws)
	}
	if err != nil {
		sh.graphsOff = "cuBLAS workspace: " + err.Error()
		sh.drv.graphs.free()
		sh.drv.graphs = nil
	}
}

// GraphsOff says why the device runs no CUDA graphs ("" when it can).
func (d *Device) GraphsOff() string { return d.sh.graphsOff }

// SetGraphs turns the device's CUDA graphs on (the default, where the
// device has them) or off, for all its values (siblings included): off,
// RunGraph runs every pass plainly, op by op.
func (d *Device) SetGraphs(on bool) { d.sh.gr.off.Store(!on) }

// GraphStats returns the counts of the device's graph passes since Open,
// over all its values.
func (d *Device) GraphStats() GraphStats {
	g := &d.sh.gr
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stats
}

// RunGraph runs pass (see tensor.Grapher) as a CUDA graph: the first pass of
// a key is run dry, then captured and launched; later ones are staged,
// checked against the capture and replayed. It runs pass plainly when
// graphs are off, the key cannot be graphed, or a pass differs from its
// capture (which is then captured again).
func (d *Device) RunGraph(key tensor.GraphKey, pass func()) bool {
	sh, gs := d.sh, &d.gs
	plain := func(why string) bool {
		sh.gr.count(func(s *GraphStats) {
			s.Plain++
			if s.PlainWhy == "" {
				s.PlainWhy = why
			}
		})
		pass()
		return false
	}
	switch {
	case sh.graphsOff != "":
		return plain(sh.graphsOff)
	case sh.gr.off.Load():
		return plain("graphs turned off (SetGraphs)")
	case sh.drv.gr != nil:
		return plain("a graph pass inside another")
	case gs.plain[key]:
		return plain("")
	}
	if g := gs.graphs[key]; g != nil {
		r := &gs.run
		*r = graphRun{mode: graphReplay, g: g}
		why := d.graphPass(r, pass)
		if why == "" && r.diff == "" && r.at == len(g.ops) {
			d.launchGraph(g)
			sh.gr.count(func(s *GraphStats) { s.Replays++ })
			return true
		}
		if r.diff == "" {
			r.diff = why
		}
		sh.gr.count(func(s *GraphStats) { s.Mismatches++; s.MismatchWhy = r.diff })
		d.dropGraph(key, g)
		pass()
		return false
	}
	if len(gs.graphs) >= maxGraphs {
		return plain(fmt.Sprintf("more than %d pass shapes", maxGraphs))
	}
	g, why := d.capture(pass)
	if g == nil {
		if gs.plain == nil {
			gs.plain = map[tensor.GraphKey]bool{}
		}
		gs.plain[key] = true
		return plain(why)
	}
	if gs.graphs == nil {
		gs.graphs = map[tensor.GraphKey]*devGraph{}
	}
	gs.graphs[key] = g
	sh.gr.count(func(s *GraphStats) { s.Captures++ })
	d.launchGraph(g)
	return true
}

// graphPass runs pass as r says, returning why it stopped early ("" when it
// did not). A capture interrupted by a panic is ended; a panic other than
// graphAbort goes on unless the driver invalidated the capture (the pass
// made a call the capture forbids: the panic is that call's failure).
func (d *Device) graphPass(r *graphRun, pass func()) (why string) {
	drv := d.sh.drv
	r.dev = d
	drv.gr = r
	defer func() {
		drv.gr = nil
		p := recover()
		if p == nil {
			return
		}
		invalidated := false
		if r.mode == graphCapture {
			graph, err := drv.endCapture()
			if graph != 0 {
				drv.graphDestroy(0, graph)
			}
			if e, ok := err.(*driverError); ok && e.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED" {
				invalidated = true
			}
		}
		if a, ok := p.(graphAbort); ok {
			why = a.why
			return
		}
		if invalidated {
			why = fmt.Sprint(p)
			return
		}
		panic(p)
	}()
	pass()
	return ""
}

// capture runs pass dry, then captures it into a new graph, or returns why
// it cannot.
func (d *Device) capture(pass func()) (*devGraph, string) {
	drv := d.sh.drv
	r := &d.gs.run
	*r = graphRun{mode: graphDry}
	if why := d.graphPass(r, pass); why != "" {
		return nil, why
	}
	g := &devGraph{size: max(r.off, 16)}
	host, err := drv.hostAlloc(g.size)
	if err != nil {
		return nil, "pinning the staging buffer: " + err.Error()
	}
	g.host = host
	if g.dev, err = d.allocBytes(g.size); err != nil {
		drv.hostFree(host)
		return nil, "the staging buffer: " + err.Error()
	}
	fail := func(why string) (*devGraph, string) {
		drv.graphDestroy(g.exec, g.graph)
		drv.hostFree(host)
		return nil, why
	}
	if err := drv.beginCapture(); err != nil {
		return fail(err.Error())
	}
	*r = graphRun{mode: graphCapture, g: g}
	if why := d.graphPass(r, pass); why != "" {
		return fail(why) // graphPass ended the capture
	}
	if g.graph, err = drv.endCapture(); err != nil {
		return fail(err.Error())
	}
	if g.exec, err = drv.instantiate(g.graph); err != nil {
		return fail(err.Error())
	}
	g.ops = r.ops
	return g, ""
}

// launchGraph copies the staged values to the device and launches g.
func (d *Device) launchGraph(g *devGraph) {
	drv := d.sh.drv
	d.check("staging a graph's values", drv.htod(g.dev, g.host, g.size))
	d.check("launching a graph", drv.graphLaunch(g.exec))
}

// dropGraph forgets the graph of key (its staging buffer's device half
// stays in the arena until Close).
func (d *Device) dropGraph(key tensor.GraphKey, g *devGraph) {
	drv := d.sh.drv
	d.check("freeing a graph", drv.sync())
	drv.graphDestroy(g.exec, g.graph)
	drv.hostFree(g.host)
	delete(d.gs.graphs, key)
}

// freeGraphs frees the device value's graphs (Close).
func (d *Device) freeGraphs() {
	drv := d.sh.drv
	for key, g := range d.gs.graphs {
		drv.graphDestroy(g.exec, g.graph)
		drv.hostFree(g.host)
		delete(d.gs.graphs, key)
	}
}

// graphing returns the graph pass in progress on the device, or nil: the
// ops that change what they issue for one (launches, toDevice, Attend,
// KVWrite) ask. A pass belongs to one device value: another value's op
// during it (a sibling on another goroutine) would be captured into the
// graph, or skipped, so it panics instead. The device's values run one at a
// time where graphs are on (generate and eval alternate the target and the
// drafter on one goroutine); SetGraphs(false) lifts that.
func (d *Device) graphing() *graphRun {
	r := d.sh.drv.gr
	if r != nil && r.dev != d {
		panic("cuda: an op of another value of the device during a CUDA graph pass (turn graphs off with SetGraphs(false) to run the device's values concurrently)")
	}
	return r
}

// stageToDevice is toDevice in a graph pass: the bytes go to the staging
// buffer, and a device-to-device copy node takes them to dst.
func (d *Device) stageToDevice(r *graphRun, dst uint64, src unsafe.Pointer, bytes int) {
	at := r.stage(src, bytes)
	d.check("copy to the device", d.sh.drv.dtod(dst, at, bytes))
}

// kvWriteStaged is KVWrite in a graph pass: the rows' addresses in the
// cache are staged and drafter_core_kv_write reads them there.
func (d *Device) kvWriteStaged(r *graphRun, kd, vd uint64, k, v tensor.Tensor, n int) {
	tab := [2]uint64{kd, vd}
	at := r.stage(unsafe.Pointer(&tab[0]), 16)
	blocks := min((n+255)/256, 1024)
	a := d.args()
	a.addr(at).ptr(k).ptr(v).u64(uint64(n))
	d.launch(d.core.kvWrite, dim3{uint32(blocks), 2, 1}, dim3{256, 1, 1}, 0)
}
