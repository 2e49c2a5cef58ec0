package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// greedyIDs runs drafter generate on device and returns the generated ids.
func greedyIDs(t *testing.T, model, device, prompt string, n string) []int {
	t.Helper()
	r := runCLI(t, nil, "generate", "--device", device, "--model", model, "--prompt", prompt, "--max-new-tokens", n, "--json")
	if r.code != exitOK {
		t.Fatalf("generate --device %s: exit %d: %s", device, r.code, r.msg)
	}
	var got struct {
		IDs []int `json:"generated_ids"`
	}
	if err := json.Unmarshal([]byte(r.out), &got); err != nil {
		t.Fatalf("generate --device %s --json: %v\n%s", device, err, r.out)
	}
	return got.IDs
}

// cudaModels returns the bundled stories260k as it is (float32) and
// converted to a bf16 checkpoint.
func cudaModels(t *testing.T) map[string]string {
	bf16 := testutil.CopyDir(t, testutil.Stories260k())
	testmodel.Convert(t, bf16, safetensors.BF16)
	return map[string]string{"f32": testutil.Stories260k(), "bf16": bf16}
}

// TestCUDAGreedyParity: greedy generation on the CUDA device gives the CPU
// device's ids, on a float32 and a bf16 checkpoint, for several prompts.
func TestCUDAGreedyParity(t *testing.T) {
	testutil.NeedCUDA(t)
	for name, model := range cudaModels(t) {
		for _, prompt := range []string{"Once upon a time", "The little dog", "Lily wanted to"} {
			cpu := greedyIDs(t, model, "cpu", prompt, "48")
			gpu := greedyIDs(t, model, "cuda", prompt, "48")
			if len(cpu) == 0 || !equalInts(cpu, gpu) {
				t.Errorf("%s %q: cuda generated\n%v\nthe cpu\n%v", name, prompt, gpu, cpu)
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCUDAEvalLossless trains small Medusa and EAGLE-3 drafters on the CPU,
// then evaluates each on the CUDA device in chain and tree mode, on a
// float32 and a bf16 checkpoint: every speculative output equals the
// device's own greedy output (eval exits 0 only then), and the acceptance
// equals the CPU device's.
func TestCUDAEvalLossless(t *testing.T) {
	testutil.NeedCUDA(t)
	tmp := t.TempDir()
	prompts := trainPrompts(t, tmp, 40)
	run := func(args ...string) cliResult {
		t.Helper()
		r := runCLI(t, nil, args...)
		if r.code != exitOK {
			t.Fatalf("drafter %s: exit %d: %s", strings.Join(args, " "), r.code, r.msg)
		}
		return r
	}
	for name, model := range cudaModels(t) {
		dir := filepath.Join(tmp, name)
		run("distill", "--device", "cpu", "--model", model, "--prompts", prompts, "--out", filepath.Join(dir, "distill"), "--max-new-tokens", "32", "--temperature", "0", "--quiet")
		for _, m := range []struct {
			method string
			extra  []string
		}{
			{"medusa", []string{"--heads", "3", "--max-steps", "40"}},
			{"eagle3", []string{"--epochs", "2", "--draft-vocab", "128"}},
		} {
			out := filepath.Join(dir, m.method)
			run(append([]string{"train", m.method, "--device", "cpu", "--model", model, "--data", filepath.Join(dir, "distill"), "--out", out, "--quiet"}, m.extra...)...)
			for _, mode := range []string{"chain", "tree"} {
				accept := map[string]float64{}
				for _, device := range []string{"cpu", "cuda"} {
					report := filepath.Join(dir, m.method+"-"+mode+"-"+device+".json")
					run("eval", "--device", device, "--model", model, "--drafter", out, "--prompts", "../../data/prompts/stories-eval.jsonl",
						"--limit", "3", "--max-new-tokens", "24", "--temperature", "0", "--mode", mode, "--report", report, "--quiet")
					accept[device] = checkLossless(t, name+" "+m.method+" "+mode+" on "+device, report, 3)
				}
				if accept["cpu"] != accept["cuda"] || accept["cpu"] < 1 {
					t.Errorf("%s %s %s: acceptance %.4f on cuda, %.4f on the cpu", name, m.method, mode, accept["cuda"], accept["cpu"])
				}
			}
		}
	}
}

// TestDeviceFallbacks: --device auto falls back to the CPU with its one-line
// reason on stderr and runs; --device cuda fails with that reason (exit 1);
// a value that is no device is a usage error (exit 2). Each way CUDA can be
// missing: no driver library, a driver whose cuInit fails (the stand-in
// built to return 100, when make cuda-standin has built it), no cuBLAS.
func TestDeviceFallbacks(t *testing.T) {
	gen := func(device string) cliResult {
		return runCLI(t, nil, "generate", "--device", device, "--model", testutil.Stories260k(), "--prompt", "Once", "--max-new-tokens", "4")
	}
	if r := gen("tpu"); r.code != exitUsage || !strings.Contains(r.msg, `--device "tpu"`) {
		t.Errorf("--device tpu: exit %d: %s", r.code, r.msg)
	}
	standin := filepath.Join(testutil.Root(), "build", "cuda-standin")
	cases := []struct {
		name, libcuda, libs, reason string
		needStandin                 bool
	}{
		{"no driver", filepath.Join(t.TempDir(), "libcuda.so.1"), "", "libcuda.so.1", false},
		{"cuInit fails", filepath.Join(standin, "initfail", "libcuda.so.1"), standin, "cuInit -> 100 (CUDA_ERROR_NO_DEVICE)", true},
		{"no cuBLAS", filepath.Join(standin, "libcuda.so.1"), t.TempDir(), "cuBLAS", true},
	}
	for _, c := range cases {
		if !cgoBuild {
			// Every way ends at the same reason: there is no CUDA at all.
			c.reason, c.needStandin = "drafter was built without cgo: CUDA needs it", false
		}
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.libcuda); c.needStandin && err != nil {
				if os.Getenv("DRAFTER_REQUIRE_CUDA") != "" {
					t.Fatalf("the stand-in driver is not built (make cuda-standin): %v", err)
				}
				t.Skipf("the stand-in driver is not built (make cuda-standin): %v", err)
			}
			t.Setenv("DRAFTER_LIBCUDA", c.libcuda)
			t.Setenv("DRAFTER_CUDA_LIBS", c.libs)
			r := gen("cuda")
			if r.code != exitError || !strings.Contains(r.msg, c.reason) || !strings.HasPrefix(r.msg, "--device cuda: ") {
				t.Errorf("--device cuda: exit %d: %q, want exit 1 with the reason %q", r.code, r.msg, c.reason)
			}
			r = gen("auto")
			if r.code != exitOK || !strings.Contains(r.stderr, c.reason) || !strings.Contains(r.stderr, "using the CPU") {
				t.Errorf("--device auto: exit %d (%s), stderr %q: want it to run on the CPU, saying why (%q)", r.code, r.msg, r.stderr, c.reason)
			}
			var notes []string
			for _, l := range strings.Split(r.stderr, "\n") {
				if strings.HasPrefix(l, "device: ") {
					notes = append(notes, l)
				}
			}
			if len(notes) != 1 || !strings.Contains(notes[0], c.reason) || !strings.HasSuffix(notes[0], ": using the CPU (go)") && !strings.HasSuffix(notes[0], ": using the CPU (openblas)") {
				t.Errorf("--device auto: want one line saying why the CPU runs, got %q", r.stderr)
			}
			r = runCLI(t, nil, "devices")
			if r.code != exitOK || !strings.Contains(r.out, "cpu") || !strings.Contains(r.out, c.reason) {
				t.Errorf("devices: exit %d: %s%s", r.code, r.out, r.msg)
			}
		})
	}
}
