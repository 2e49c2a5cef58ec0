package distill

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// cudaFeatureTol bounds |cuda - cpu| of a stored feature (float32 storage)
// of stories260k at temperature 0. The devices sum their products in other
// orders (drafter's few-row kernel, which every pass of these short prompts
// takes, against the CPU's blocked products; both use float32 activations,
// so a bf16 checkpoint rounds nothing more), so the states differ in their
// last bits, a few ulps of values up to about 10 (an ulp of 8 is 9.5e-7),
// growing through the layers. Measured on the stand-ins: worst 9.1e-6
// (float32 checkpoint) and 4.8e-6 (bf16), at --batch 1 and 3 alike. The
// bound is a few times that; a wrong tap, row or position differs by the
// states' own size (order 0.1 to 10).
const cudaFeatureTol = 3e-5

// cudaPrompts writes n of the story prompts.
func cudaPrompts(t *testing.T, dir string, n int) string {
	var b strings.Builder
	for _, p := range storyPrompts[:n] {
		fmt.Fprintf(&b, "{\"prompt\": %q}\n", p)
	}
	return writeFile(t, dir, "cuda-prompts.jsonl", b.String())
}

// runBin runs the drafter binary with env added and returns its combined
// output and error.
func runBin(bin string, env []string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// TestCUDADistillParity: distill on the CUDA device (the stand-ins) at
// temperature 0 stores the CPU device's tokens and responses, and features
// within cudaFeatureTol of the CPU's, on a float32 and a bf16 checkpoint,
// with --batch 1 and --batch 3 (5 prompts: the slots are refilled as
// sequences finish).
func TestCUDADistillParity(t *testing.T) {
	testutil.NeedCUDA(t)
	dir := t.TempDir()
	t.Setenv(filecache.EnvDir, t.TempDir())
	bin := buildDrafter(t, dir)
	prompts := cudaPrompts(t, dir, 5)
	bf16 := testutil.CopyDir(t, testutil.Stories260k())
	testmodel.Convert(t, bf16, safetensors.BF16)
	for _, m := range []struct{ name, path string }{{"f32", testutil.Stories260k()}, {"bf16", bf16}} {
		for _, batch := range []string{"1", "3"} {
			outs := map[string]string{}
			for _, dev := range []string{"cpu", "cuda"} {
				out := filepath.Join(dir, m.name+"-"+batch+"-"+dev)
				if msg, err := runBin(bin, nil, "distill", "--device", dev, "--model", m.path, "--prompts", prompts, "--out", out,
					"--temperature", "0", "--max-new-tokens", "12", "--batch", batch, "--dtype", "float32", "--quiet"); err != nil {
					t.Fatalf("distill --device %s: %v\n%s", dev, err, msg)
				}
				outs[dev] = out
			}
			what := m.name + " --batch " + batch
			if !slices.EqualFunc(readResponses(t, outs["cpu"]), readResponses(t, outs["cuda"]), respEqual) {
				t.Fatalf("%s: the responses differ between the devices", what)
			}
			cpu, gpu := readCapture(t, outs["cpu"]), readCapture(t, outs["cuda"])
			if len(cpu) != 5 || len(gpu) != 5 {
				t.Fatalf("%s: %d samples on the cpu, %d on cuda; want 5", what, len(cpu), len(gpu))
			}
			worst := 0.0
			for id, a := range cpu {
				b := gpu[id]
				if !slices.Equal(a.tokens, b.tokens) || !slices.Equal(a.mask, b.mask) {
					t.Fatalf("%s: sample %d: tokens differ", what, id)
				}
				for c := range a.states {
					if len(a.states[c]) != len(b.states[c]) {
						t.Fatalf("%s: sample %d column %d: %d values on the cpu, %d on cuda", what, id, c, len(a.states[c]), len(b.states[c]))
					}
					for k := range a.states[c] {
						worst = math.Max(worst, math.Abs(float64(a.states[c][k]-b.states[c][k])))
					}
				}
			}
			t.Logf("%s: worst |cuda - cpu| of a feature %.3g (tolerance %g)", what, worst, cudaFeatureTol)
			if !(worst <= cudaFeatureTol) {
				t.Errorf("%s: features differ by up to %g between the devices, above %g", what, worst, cudaFeatureTol)
			}
		}
	}
}

// TestCUDADistillKillAndResume: a distill on the CUDA device SIGKILLed after
// its first and second shards and rerun stores the same bytes as an
// uninterrupted run (the block schedule repeats on the device too).
func TestCUDADistillKillAndResume(t *testing.T) {
	testutil.NeedCUDA(t)
	dir := t.TempDir()
	bin := buildDrafter(t, dir)
	prompts := cudaPrompts(t, dir, 4)
	args := func(out string) []string {
		return []string{"distill", "--device", "cuda", "--model", testutil.Stories260k(), "--prompts", prompts, "--out", out, "--quiet",
			"--temperature", "0.9", "--max-new-tokens", "10", "--samples-per-prompt", "2", "--seed", "5",
			"--batch", "2", "--shard-rows", "40", "--dtype", "float16"}
	}
	killAndResume(t, bin, dir, args, 3, []func(out string) bool{afterShard(1), afterShard(2)})
}

// TestCUDADistillBatchMemory: on a device of 44 MiB (the stand-in's
// DRAFTER_STANDIN_MEMORY, of which the stand-in's context and drafter's
// kernels, scratch and cuBLAS workspace take some 36 MiB before the
// weights) a --batch whose caches exceed the free memory is refused naming
// --batch and the numbers; on one of 40.25 MiB (a few hundred KiB left for
// caches after the reserve), without --batch,
// the batch is the number of sequences whose caches fit (fewer than the
// samples), and the start line reports it; an explicit --batch that fits is
// taken as given.
func TestCUDADistillBatchMemory(t *testing.T) {
	testutil.NeedCUDA(t)
	dir := t.TempDir()
	bin := buildDrafter(t, dir)
	prompts := cudaPrompts(t, dir, 3)
	mem := func(m string) []string {
		return []string{"DRAFTER_STANDIN_MEMORY=" + m, filecache.EnvDir + "=" + t.TempDir()}
	}
	base := []string{"distill", "--device", "cuda", "--model", testutil.Stories260k(), "--prompts", prompts, "--temperature", "0", "--max-new-tokens", "4"}
	msg, err := runBin(bin, mem("44M"), append(base, "--out", filepath.Join(dir, "big"), "--batch", "1000")...)
	if err == nil || !strings.Contains(msg, "--batch 1000 does not fit") || !strings.Contains(msg, "free of 44.0 MiB") || !strings.Contains(msg, "lower --batch") {
		t.Fatalf("--batch 1000 on 44 MiB: %v\n%s", err, msg)
	}
	if fits := between(t, msg, "at most ", " sequences fit"); fits < 1 || fits >= 1000 {
		t.Fatalf("the error says %d sequences fit\n%s", fits, msg)
	}
	msg, err = runBin(bin, mem("41216K"), append(base, "--out", filepath.Join(dir, "auto"), "--samples-per-prompt", "5", "--max-new-tokens", "16")...)
	if err != nil {
		t.Fatalf("distill without --batch: %v\n%s", err, msg)
	}
	fits := between(t, msg, "(from free memory, ", " fit)")
	batch := between(t, msg, "; batch ", " (from free memory")
	if fits < 2 || fits >= 15 || batch != fits {
		t.Fatalf("15 samples, %d sequences fit: want that batch, the line says %d\n%s", fits, batch, msg)
	}
	if !strings.Contains(msg, "distill: tokens drawn on the device; states copied to pinned host memory on a second stream during the next pass") {
		t.Fatalf("want the start lines to say the tokens are drawn on the device and the states copied on a second stream:\n%s", msg)
	}
	msg, err = runBin(bin, mem("41216K"), append(base, "--out", filepath.Join(dir, "two"), "--batch", "2")...)
	if err != nil || !strings.Contains(msg, "batch 2 (--batch, ") {
		t.Fatalf("--batch 2: %v\n%s", err, msg)
	}
}

// between parses the integer in s between the first before and the next
// after.
func between(t *testing.T, s, before, after string) int {
	t.Helper()
	_, rest, ok := strings.Cut(s, before)
	num, _, ok2 := strings.Cut(rest, after)
	n, err := strconv.Atoi(num)
	if !ok || !ok2 || err != nil {
		t.Fatalf("no %q<n>%q in\n%s", before, after, s)
	}
	return n
}
