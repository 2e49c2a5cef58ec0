package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// Tolerances of TestCUDATrain: the largest relative difference between a
// CUDA run's training loss and the CPU device's at the same step.
//
// fp32 products: both devices compute in float32 and differ only in the
// order of their sums (cuBLAS's blocking, the kernels' reductions). On the
// stand-ins, 30 steps of either method on the float32 stories260k differed
// from the CPU's by at most 1.4e-7 relative (medusa; 7.8e-8 eagle3), and
// this test's runs by at most 8.1e-8 on either checkpoint. 2e-5 leaves a
// GPU's float32 orders about 100 times that, and still fails a run whose
// products were rounded to bf16: in the 30-step runs those differed by more
// than 2e-5 at 27 of 30 steps (medusa) and 26 of 30 (eagle3).
//
// bf16 products (the default on CUDA): every operand of a product is
// rounded to 8 significant bits (relative error up to 2^-9) before float32
// accumulation; over 30 steps the losses moved from the float32 ones by at
// most 8.7e-4 relative (medusa; 5.5e-4 eagle3), in this test's runs by at
// most 6.2e-4. 2^-8 (3.9e-3), the spacing of bf16 values at 1, bounds the
// drift at one bf16 step of the loss's own value, 4.5 times the largest
// measured.
const (
	trainTolFP32 = 2e-5
	trainTolBF16 = 0x1p-8
)

// stepLosses reads the per-step training losses of a metrics.jsonl (the
// "train" records, which --log-every 1 writes at every step).
func stepLosses(t *testing.T, path string) map[int]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[int]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			Kind string   `json:"kind"`
			Step int      `json:"step"`
			Loss *float64 `json:"loss"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if r.Loss != nil && (r.Kind == "train" || r.Kind == "") {
			out[r.Step] = *r.Loss
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCUDATrain trains Medusa and EAGLE-3 on --device cuda, on a float32 and
// a bf16 stories260k, once with float32 products (--precision fp32) and once
// with the default (bf16 products on the GPU), and the same command on the
// CPU device: every step's training loss tracks the CPU's within
// trainTolFP32 and trainTolBF16 (see there: measured, and why), drafter.json
// records the products used, the exports pass check-export (train runs it on
// them before it exits 0, and the command here again for the bf16 ones), and eval of the drafter trained with bf16
// products on --device cuda is lossless: its output is the GPU's own greedy
// output.
func TestCUDATrain(t *testing.T) {
	testutil.NeedCUDA(t)
	tmp := t.TempDir()
	prompts := trainPrompts(t, tmp, 12)
	run := func(args ...string) {
		t.Helper()
		if r := runCLI(t, nil, args...); r.code != exitOK {
			t.Fatalf("drafter %s: exit %d: %s", strings.Join(args, " "), r.code, r.msg)
		}
	}
	for name, model := range cudaModels(t) {
		dir := filepath.Join(tmp, name)
		data := filepath.Join(dir, "distill")
		run("distill", "--device", "cpu", "--model", model, "--prompts", prompts, "--out", data, "--max-new-tokens", "24", "--temperature", "0", "--quiet")
		for _, m := range []struct {
			method string
			extra  []string
		}{
			{"medusa", []string{"--heads", "3", "--max-steps", "8"}},
			{"eagle3", []string{"--draft-vocab", "128", "--max-steps", "5"}},
		} {
			train := func(device, precision string) (string, map[int]float64) {
				out := filepath.Join(dir, m.method+"-"+device+"-"+precision)
				run(append([]string{"train", m.method, "--device", device, "--precision", precision, "--model", model, "--data", data,
					"--out", out, "--log-every", "1", "--quiet"}, m.extra...)...)
				return out, stepLosses(t, filepath.Join(out, "metrics.jsonl"))
			}
			_, cpu := train("cpu", "auto")
			if len(cpu) < 5 {
				t.Fatalf("%s %s: %d training losses in metrics.jsonl, want one per step", name, m.method, len(cpu))
			}
			for _, c := range []struct {
				precision, products string
				tol                 float64
			}{{"fp32", "fp32", trainTolFP32}, {"auto", "bf16", trainTolBF16}} {
				out, gpu := train("cuda", c.precision)
				what := fmt.Sprintf("%s %s --precision %s", name, m.method, c.precision)
				if len(gpu) != len(cpu) {
					t.Errorf("%s: %d steps logged on cuda, %d on the cpu", what, len(gpu), len(cpu))
				}
				worst := 0.0
				for step, want := range cpu {
					got, ok := gpu[step]
					rel := math.Abs(got-want) / math.Abs(want)
					if !ok || !(rel <= c.tol) {
						t.Errorf("%s: step %d loss %.9g on cuda, %.9g on the cpu (relative %.3g > %.3g)", what, step, got, want, rel, c.tol)
					}
					worst = max(worst, rel)
				}
				t.Logf("%s: losses within %.3g of the cpu's (relative)", what, worst)
				var prov struct {
					Args struct {
						Products string `json:"products"`
					} `json:"args"`
				}
				b, err := os.ReadFile(filepath.Join(out, "drafter.json"))
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, &prov); err != nil || prov.Args.Products != c.products {
					t.Errorf("%s: drafter.json records products %q (%v), want %q", what, prov.Args.Products, err, c.products)
				}
				if c.products != "bf16" {
					continue
				}
				run("check-export", out)
				report := filepath.Join(dir, m.method+"-eval.json")
				run("eval", "--device", "cuda", "--model", model, "--drafter", out, "--prompts", "../../data/prompts/stories-eval.jsonl",
					"--limit", "2", "--max-new-tokens", "16", "--temperature", "0", "--mode", "chain", "--report", report, "--quiet")
				checkLossless(t, what+" eval on cuda", report, 2)
			}
		}
	}
}

// TestTrainPrecisionFlag: --precision takes auto, fp32 or bf16; another
// value is a usage error naming the flag, and bf16 on the CPU device, which
// has no bf16 products, is an error saying so.
func TestTrainPrecisionFlag(t *testing.T) {
	tmp := t.TempDir()
	r := runCLI(t, nil, "train", "medusa", "--precision", "fp8", "--model", "x", "--data", tmp, "--out", filepath.Join(tmp, "o"))
	if r.code != exitUsage || !strings.Contains(r.msg, `--precision "fp8"`) {
		t.Errorf("--precision fp8: exit %d: %s", r.code, r.msg)
	}
	prompts := trainPrompts(t, tmp, 4)
	data := filepath.Join(tmp, "distill")
	if r := runCLI(t, nil, "distill", "--device", "cpu", "--model", testutil.Stories260k(), "--prompts", prompts, "--out", data, "--max-new-tokens", "8", "--temperature", "0", "--quiet"); r.code != exitOK {
		t.Fatalf("distill: exit %d: %s", r.code, r.msg)
	}
	r = runCLI(t, nil, "train", "medusa", "--device", "cpu", "--precision", "bf16", "--model", testutil.Stories260k(), "--data", data, "--out", filepath.Join(tmp, "o"), "--max-steps", "1", "--quiet")
	if r.code != exitError || !strings.Contains(r.msg, "--precision bf16") || !strings.Contains(r.msg, "float32 only") {
		t.Errorf("--device cpu --precision bf16: exit %d: %s", r.code, r.msg)
	}
}
