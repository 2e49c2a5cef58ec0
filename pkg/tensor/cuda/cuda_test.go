package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/tensortest"
)

// The tests run the device on whatever $DRAFTER_LIBCUDA names: the stand-in
// driver (make cuda-check: build/cuda-standin, kernels run on CPU threads,
// cuBLAS in C++) or, on a GPU machine, the real libcuda.so.1. Without it they
// skip, saying why.

// skipUnlessRequired skips the test saying why, or fails it where
// DRAFTER_REQUIRE_CUDA is set (CI, make cuda-check): there a test that
// cannot reach the driver must not pass by skipping.
func skipUnlessRequired(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("DRAFTER_REQUIRE_CUDA") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// openTest opens GPU 0 of the driver $DRAFTER_LIBCUDA names, or skips.
func openTest(t testing.TB) *Device {
	t.Helper()
	lib := os.Getenv("DRAFTER_LIBCUDA")
	if lib == "" {
		skipUnlessRequired(t, "DRAFTER_LIBCUDA is not set (make cuda-check points it at the stand-in driver)")
	}
	if strings.Contains(lib, "/") {
		if _, err := os.Stat(lib); err != nil {
			skipUnlessRequired(t, fmt.Sprintf("DRAFTER_LIBCUDA: %v (make cuda-standin builds the stand-in)", err))
		}
	}
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// TestConformance runs the device conformance suite (every op against its
// float64 reference).
func TestConformance(t *testing.T) {
	d := openTest(t)
	t.Logf("%s: %s", d.Name(), d.Info())
	tensortest.Ops(t, d)
}

// repoRoot returns the repository's root (where go.mod is).
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// probeIn runs Probe(0) in a child process (the test binary, running
// TestProbeChild) with the environment env added, and returns its error's
// message ("" when Probe succeeded). A child keeps each stand-in library out
// of the other tests' process: two libcuda.so.1 loaded at once would share a
// soname.
func probeIn(t *testing.T, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestProbeChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{"DRAFTER_PROBE_CHILD=1"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe child: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "--- FAIL") {
		t.Fatalf("probe child failed:\n%s", out)
	}
	for line := range strings.Lines(string(out)) {
		if msg, ok := strings.CutPrefix(line, "probe: "); ok {
			return strings.TrimSpace(msg)
		}
	}
	t.Fatalf("probe child printed no result:\n%s", out)
	return ""
}

// TestProbeChild is probeIn's child: it prints Probe(0)'s outcome.
func TestProbeChild(t *testing.T) {
	if os.Getenv("DRAFTER_PROBE_CHILD") != "1" {
		t.Skip("run by TestFallbacks in a child process")
	}
	ordinal := 0
	if os.Getenv("DRAFTER_PROBE_ORDINAL") == "1" {
		ordinal = 1
	}
	if os.Getenv("DRAFTER_PROBE_ALL") == "1" {
		infos, err := ProbeAll()
		if err == nil && (len(infos) == 0 || infos[0].Err != nil || infos[0].Name == "") {
			t.Errorf("ProbeAll: %v", infos)
		}
		if err != nil {
			t.Errorf("ProbeAll: %v", err)
		}
	}
	_, err := Probe(ordinal)
	if err != nil {
		os.Stdout.WriteString("probe: " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n")
		return
	}
	os.Stdout.WriteString("probe: \n")
}

// TestFallbacks checks Probe's one-line reasons where CUDA cannot run: no
// driver, a driver whose cuInit fails, no cuBLAS. None needs a GPU.
func TestFallbacks(t *testing.T) {
	if !cgoEnabled {
		_, err := Probe(0)
		if err == nil || err.Error() != "drafter was built without cgo: CUDA needs it" {
			t.Fatalf("Probe without cgo: %v", err)
		}
		if _, err := Open(0); err == nil {
			t.Fatal("Open without cgo succeeded")
		}
		return
	}
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	t.Setenv("DRAFTER_LIBCUDA", missing)
	_, err := Probe(0)
	if err == nil || !strings.Contains(err.Error(), missing+": cannot open shared object file") {
		t.Fatalf("Probe with a missing driver: %v", err)
	}
	if _, err := ProbeAll(); err == nil {
		t.Fatal("ProbeAll with a missing driver succeeded")
	}

	standin := filepath.Join(repoRoot(t), "build", "cuda-standin")
	initfail := filepath.Join(standin, "initfail", "libcuda.so.1")
	if _, err := os.Stat(initfail); err != nil {
		skipUnlessRequired(t, fmt.Sprintf("the stand-in driver is not built (make cuda-standin): %v", err))
	}
	msg := probeIn(t, "DRAFTER_LIBCUDA="+initfail, "DRAFTER_CUDA_LIBS="+standin)
	if !strings.Contains(msg, "cuInit -> 100 (CUDA_ERROR_NO_DEVICE)") || !strings.HasPrefix(msg, "driver ") {
		t.Errorf("Probe with cuInit failing: %q", msg)
	}
	empty := t.TempDir()
	msg = probeIn(t, "DRAFTER_LIBCUDA="+filepath.Join(standin, "libcuda.so.1"), "DRAFTER_CUDA_LIBS="+empty)
	if want := "no cuBLAS in " + empty + ": tried libcublas.so.13, .12, .11"; msg != want {
		t.Errorf("Probe without cuBLAS: %q, want %q", msg, want)
	}
	msg = probeIn(t, "DRAFTER_LIBCUDA="+filepath.Join(standin, "libcuda.so.1"), "DRAFTER_CUDA_LIBS="+standin, "DRAFTER_PROBE_ALL=1")
	if msg != "" {
		t.Errorf("Probe of the stand-in: %q, want success", msg)
	}
	msg = probeIn(t, "DRAFTER_LIBCUDA="+filepath.Join(standin, "libcuda.so.1"), "DRAFTER_CUDA_LIBS="+standin, "DRAFTER_PROBE_ORDINAL=1")
	if !strings.HasPrefix(msg, "no GPU 1: driver ") || !strings.HasSuffix(msg, " sees 1 (0 to 0)") {
		t.Errorf("Probe of GPU 1 of the stand-in: %q", msg)
	}
}

// randVals returns n normal values of scale s.
func randVals(r *rand.Rand, n int, s float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * s)
	}
	return v
}

// devTensor returns a float32 tensor of d holding v.
func devTensor(t *testing.T, d *Device, v []float32, rows, cols int) tensor.Tensor {
	t.Helper()
	x, err := d.Alloc(tensor.F32, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	d.Write(x, v)
	return x
}

func readAll(d *Device, x tensor.Tensor) []float32 {
	v := make([]float32, x.Len())
	d.Read(v, x)
	return v
}

// halfWeight returns v as a [n, k] weight of dtype dt and its values widened.
func halfWeight(dt tensor.DType, v []float32, n, k int) (tensor.Weight, []float32) {
	switch dt {
	case tensor.BF16:
		h := make([]uint16, len(v))
		tensor.F32ToBF16(h, v)
		back := make([]float32, len(v))
		tensor.BF16ToF32(back, h)
		return tensor.WeightOf(tensor.HalfMatrix(dt, h, n, k)), back
	case tensor.F16:
		h := make([]uint16, len(v))
		tensor.F32ToF16(h, v)
		back := make([]float32, len(v))
		tensor.F16ToF32(back, h)
		return tensor.WeightOf(tensor.HalfMatrix(dt, h, n, k)), back
	}
	return tensor.WeightOf(tensor.F32Matrix(v, n, k)), v
}

// TestMulTShapes checks MulT on the shapes the conformance suite leaves out:
// k a multiple of 8 (the few-row kernel's vector loads), rows across its
// tiles, both sides of FewRows, and each row alone giving the same bits.
func TestMulTShapes(t *testing.T) {
	d := openTest(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		for _, k := range []int{64, 264, 45} {
			for _, rows := range []int{1, 9, 17, tensor.FewRows, tensor.FewRows + 1, 100} {
				n := 37
				w, wv := halfWeight(dt, randVals(r, n*k, 0.5), n, k)
				xv := randVals(r, rows*k, 1)
				ov := randVals(r, rows*n, 1)
				x, out := devTensor(t, d, xv, rows, k), devTensor(t, d, ov, rows, n)
				d.MulT(out, x, &w, true)
				got := readAll(d, out)
				ref := xv
				if d.RoundsInputs(dt, rows) {
					_, ref = halfWeight(dt, xv, rows, k)
				}
				for i := 0; i < rows; i++ {
					for j := 0; j < n; j++ {
						s, a := float64(ov[i*n+j]), math.Abs(float64(ov[i*n+j]))
						for c := 0; c < k; c++ {
							p := float64(ref[i*k+c]) * float64(wv[j*k+c])
							s += p
							a += math.Abs(p)
						}
						if diff := math.Abs(float64(got[i*n+j]) - s); diff > 2e-5*a {
							t.Fatalf("%s k=%d rows=%d: out[%d,%d] = %v, want %v", dt, k, rows, i, j, got[i*n+j], s)
						}
					}
				}
				if rows <= tensor.FewRows {
					// Each row alone gives the same bits.
					for _, i := range []int{0, rows / 2, rows - 1} {
						one := devTensor(t, d, ov[i*n:(i+1)*n], 1, n)
						d.MulT(one, x.RowRange(i, i+1), &w, true)
						g1 := readAll(d, one)
						for j := range g1 {
							if math.Float32bits(g1[j]) != math.Float32bits(got[i*n+j]) {
								t.Fatalf("%s k=%d rows=%d: row %d alone gives %v at %d, with the others %v", dt, k, rows, i, g1[j], j, got[i*n+j])
							}
						}
					}
				}
			}
		}
	}
}

// TestKV checks the cache's layout: KVWrite's rows land at their positions of
// the layer's planes, KVMove copies a position in every layer.
func TestKV(t *testing.T) {
	d := openTest(t)
	r := rand.New(rand.NewPCG(3, 4))
	const layers, kvDim, capacity = 3, 20, 9
	kv, err := d.NewKV(layers, kvDim, capacity)
	if err != nil {
		t.Fatal(err)
	}
	if kv.Cap() != capacity || kv.KVDim() != kvDim {
		t.Fatalf("cache of %d positions of %d, want %d of %d", kv.Cap(), kv.KVDim(), capacity, kvDim)
	}
	want := make([][2][]float32, layers)
	for l := range want {
		for h := range 2 {
			want[l][h] = make([]float32, capacity*kvDim)
		}
		kv4, vv := randVals(r, 4*kvDim, 1), randVals(r, 4*kvDim, 1)
		d.KVWrite(kv, l, 2, devTensor(t, d, kv4, 4, kvDim), devTensor(t, d, vv, 4, kvDim))
		copy(want[l][0][2*kvDim:], kv4)
		copy(want[l][1][2*kvDim:], vv)
	}
	d.KVMove(kv, 8, 3)
	d.KVMove(kv, 0, 5)
	for l := range want {
		for h := range 2 {
			p := want[l][h]
			copy(p[8*kvDim:9*kvDim], p[3*kvDim:4*kvDim])
			copy(p[0:kvDim], p[5*kvDim:6*kvDim])
		}
	}
	for l := range want {
		k, v := d.kvLayer(kv, l)
		for h, addr := range []uint64{k, v} {
			got := make([]float32, capacity*kvDim)
			d.toHost(unsafe.Pointer(&got[0]), addr, 4*len(got))
			for i := range got {
				if got[i] != want[l][h][i] {
					t.Fatalf("layer %d plane %d value %d: %v, want %v", l, h, i, got[i], want[l][h][i])
				}
			}
		}
	}
}

// TestSiblings checks that siblings share memory and run on their own
// scratch, and that closing a sibling leaves the root working.
func TestSiblings(t *testing.T) {
	d := openTest(t)
	s := d.Sibling().(*Device)
	v := []float32{1, 2, 3, 4, 5, 6}
	x := devTensor(t, d, v, 2, 3)
	got := make([]float32, 6)
	s.Read(got, x)
	for i := range v {
		if got[i] != v[i] {
			t.Fatalf("sibling reads %v, want %v", got, v)
		}
	}
	w := tensor.WeightOf(tensor.F32Matrix([]float32{1, 0, 0, 0, 1, 0}, 2, 3))
	out, _ := s.Alloc(tensor.F32, 2, 2)
	s.MulT(out, x, &w, false)
	s.Read(got[:4], out)
	if want := []float32{1, 2, 4, 5}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("sibling MulT %v, want %v", got[:4], want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	d.MulT(out, x, &w, true)
	d.Read(got[:4], out)
	if got[0] != 2 || got[3] != 10 {
		t.Fatalf("root MulT after closing a sibling: %v", got[:4])
	}
	if _, err := d.Alloc(tensor.F32, 1<<12, 1<<12); err != nil { // 64 MiB: an allocation of its own
		t.Fatal(err)
	}
}

// TestEntries checks the PTX scan that finds the kernels.
func TestEntries(t *testing.T) {
	ptx := ".version 7.0\n.visible .entry drafter_a(\n\t.param .u64 x\n)\n.entry other(\n.visible .entry drafter_b (\n"
	got := entries(ptx)
	if len(got) != 2 || got[0] != "drafter_a" || got[1] != "drafter_b" {
		t.Fatalf("entries: %v", got)
	}
	text, err := ptxFiles.ReadFile("ptx/core.ptx")
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Join(entries(string(text)), " ")
	for _, k := range []string{"drafter_core_mult_few_f32", "drafter_core_mult_few_bf16", "drafter_core_mult_few_f16",
		"drafter_core_round_bf16", "drafter_core_round_f16", "drafter_core_kv_move"} {
		if !strings.Contains(names, k) {
			t.Errorf("ptx/core.ptx lacks %s (has %s)", k, names)
		}
	}
}

// TestNoAllocs checks that the core ops allocate nothing on the Go heap per
// call (a decode step runs hundreds).
func TestNoAllocs(t *testing.T) {
	d := openTest(t)
	r := rand.New(rand.NewPCG(5, 6))
	const k, n = 64, 24
	small, big := devTensor(t, d, randVals(r, 3*k, 1), 3, k), devTensor(t, d, randVals(r, 60*k, 1), 60, k)
	outS, _ := d.Alloc(tensor.F32, 3, n)
	outB, _ := d.Alloc(tensor.F32, 60, n)
	wf, _ := halfWeight(tensor.F32, randVals(r, n*k, 1), n, k)
	wb, _ := halfWeight(tensor.BF16, randVals(r, n*k, 1), n, k)
	wm := mxfp4Weight(t, r, n, k)
	d.PrepareWeights(&wf, &wb, &wm)
	bt := devTensor(t, d, randVals(r, k*n, 1), k, n)
	kv, err := d.NewKV(2, k, 8)
	if err != nil {
		t.Fatal(err)
	}
	host := make([]float32, 3*k)
	ids := []int32{1, 2, 3}
	it, _ := d.Alloc(tensor.I32, 1, 3)
	allocs := testing.AllocsPerRun(5, func() {
		d.MulT(outS, small, &wf, false)
		d.MulT(outS, small, &wb, true)
		d.MulT(outB, big, &wf, false)
		d.MulT(outB, big, &wb, true)
		d.MulT(outS, small, &wm, true)
		d.MulT(outB, big, &wm, true)
		d.MatMul(outB, big, bt, false, false, 0.5, true)
		d.Write(small, host)
		d.WriteI32(it, ids)
		d.Read(host, small)
		d.Copy(big.RowRange(0, 3), small)
		d.Zero(outS)
		d.KVWrite(kv, 1, 2, small, small)
		d.KVMove(kv, 7, 3)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run of the core ops, want 0", allocs)
	}
}

// TestSiblingsConcurrent runs siblings on goroutines of their own at once,
// as a model and its drafter do: each computes with its own scratch on the
// shared stream and gets its own results.
func TestSiblingsConcurrent(t *testing.T) {
	d := openTest(t)
	r := rand.New(rand.NewPCG(7, 8))
	const k, n, rows = 40, 30, 60 // above FewRows: the cast scratch and cuBLAS
	w, wv := halfWeight(tensor.BF16, randVals(r, n*k, 1), n, k)
	d.PrepareWeights(&w)
	var wg sync.WaitGroup
	errs := make([]string, 4)
	for g := range errs {
		s := d.Sibling().(*Device)
		xv := randVals(r, rows*k, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			x, _ := s.Alloc(tensor.F32, rows, k)
			out, _ := s.Alloc(tensor.F32, rows, n)
			s.Write(x, xv)
			_, xr := halfWeight(tensor.BF16, xv, rows, k)
			got := make([]float32, rows*n)
			for range 5 {
				s.MulT(out, x, &w, false)
				s.Read(got, out)
				for i := 0; i < rows; i++ {
					for j := 0; j < n; j++ {
						var want, a float64
						for c := 0; c < k; c++ {
							p := float64(xr[i*k+c]) * float64(wv[j*k+c])
							want += p
							a += math.Abs(p)
						}
						if math.Abs(float64(got[i*n+j])-want) > 2e-5*a {
							errs[g] = "wrong product"
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	for g, e := range errs {
		if e != "" {
			t.Errorf("sibling %d: %s", g, e)
		}
	}
}

// TestReopen checks that a weight prepared on a device since closed is
// uploaded again by the next device instead of read from freed memory.
func TestReopen(t *testing.T) {
	first := openTest(t)
	w := tensor.WeightOf(tensor.F32Matrix([]float32{1, 2, 3, 4, 5, 6}, 2, 3))
	first.PrepareWeights(&w)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	d := openTest(t)
	x := devTensor(t, d, []float32{1, 1, 1}, 1, 3)
	out, _ := d.Alloc(tensor.F32, 1, 2)
	d.MulT(out, x, &w, false)
	got := readAll(d, out)
	if got[0] != 6 || got[1] != 15 {
		t.Fatalf("MulT by a weight of a closed device: %v, want [6 15]", got)
	}
}

// TestAllocErrors checks Alloc's errors: a shape it cannot hold, and more
// memory than the GPU has, named with the driver's error.
func TestAllocErrors(t *testing.T) {
	d := openTest(t)
	if _, err := d.Alloc(tensor.F32, 2, -1); err == nil {
		t.Fatal("Alloc of -1 columns succeeded")
	}
	_, total, err := d.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	rows := int(2*total/4/(1<<20)) + 1
	_, err = d.Alloc(tensor.F32, rows, 1<<20)
	if err == nil || !strings.HasPrefix(err.Error(), "cuda: cuMemAlloc_v2 of ") || !strings.HasSuffix(err.Error(), ": CUDA_ERROR_OUT_OF_MEMORY") {
		t.Fatalf("Alloc of twice the GPU's memory: %v", err)
	}
	t.Log(err)
	if _, err := d.Alloc(tensor.F32, 3, 3); err != nil {
		t.Fatalf("Alloc after a failed one: %v", err)
	}
}

// mxfp4Weight returns a random MXFP4 weight [n, k] (random bytes, scales
// 127 ± 10).
func mxfp4Weight(t *testing.T, r *rand.Rand, n, k int) tensor.Weight {
	t.Helper()
	blocks, scales := make([]uint8, n*k/2), make([]uint8, n*k/32)
	for i := range blocks {
		blocks[i] = uint8(r.Uint32())
	}
	for i := range scales {
		scales[i] = uint8(117 + r.IntN(21))
	}
	m, err := tensor.MXFP4Matrix(blocks, scales, n, k)
	if err != nil {
		t.Fatal(err)
	}
	return tensor.WeightOf(m)
}

// TestMulTMXFP4Panels: a product of many rows by an MXFP4 weight widened in
// several panels (the last one short) gives, column block by column block,
// the bits of the float32 weight of the same values, and its resident copy
// is the stored bytes (blocks and scales, 4.25 bits a value).
func TestMulTMXFP4Panels(t *testing.T) {
	d := openTest(t)
	defer func(v int) { mxfp4PanelValues = v }(mxfp4PanelValues)
	r := rand.New(rand.NewPCG(21, 22))
	const n, k, rows = 50, 96, tensor.FewRows + 3
	mxfp4PanelValues = 16 * k // panels of 16 rows: 16, 16, 16, 2
	w := mxfp4Weight(t, r, n, k)
	wide := w.Matrix().Float32()
	wf := tensor.WeightOf(tensor.F32Matrix(wide, n, k))
	d.PrepareWeights(&w, &wf)
	if res, ok := w.Resident(); !ok || res.DType() != tensor.MXFP4 || bytesOf(res) != n*k/2+n*k/32 {
		t.Fatalf("resident copy %v: %s of %d bytes", ok, res.DType(), bytesOf(res))
	}
	x := devTensor(t, d, randVals(r, rows*k, 1), rows, k)
	ov := randVals(r, rows*n, 1)
	for _, acc := range []bool{false, true} {
		out, ref := devTensor(t, d, ov, rows, n), devTensor(t, d, ov, rows, n)
		d.MulT(out, x, &w, acc)
		// The float32 weight's product, panel by panel: the same calls.
		for n0 := 0; n0 < n; n0 += 16 {
			n1 := min(n0+16, n)
			part := tensor.WeightOf(tensor.F32Matrix(wide[n0*k:n1*k], n1-n0, k))
			tmp := devTensor(t, d, make([]float32, rows*(n1-n0)), rows, n1-n0)
			if acc {
				cols := make([]float32, rows*(n1-n0))
				for i := range rows {
					copy(cols[i*(n1-n0):(i+1)*(n1-n0)], ov[i*n+n0:i*n+n1])
				}
				d.Write(tmp, cols)
			}
			d.MulT(tmp, x, &part, acc)
			got := make([]float32, rows*(n1-n0))
			d.Read(got, tmp)
			all := make([]float32, rows*n)
			d.Read(all, out)
			for i := range rows {
				for j := n0; j < n1; j++ {
					if g, want := all[i*n+j], got[i*(n1-n0)+j-n0]; math.Float32bits(g) != math.Float32bits(want) {
						t.Fatalf("acc %v: row %d column %d is %g, the float32 panel's %g", acc, i, j, g, want)
					}
				}
			}
		}
		d.MulT(ref, x, &wf, acc)
		a, b := make([]float32, rows*n), make([]float32, rows*n)
		d.Read(a, out)
		d.Read(b, ref)
		for i := range a {
			// The whole float32 weight's single call may sum in another
			// order on a GPU; within float32 rounding of it.
			if math.Abs(float64(a[i]-b[i])) > 1e-5*float64(k)*(1+math.Abs(float64(b[i]))) {
				t.Fatalf("acc %v: value %d is %g, the float32 weight's %g", acc, i, a[i], b[i])
			}
		}
	}
}
