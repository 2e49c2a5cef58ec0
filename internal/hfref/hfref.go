// Package hfref gives tests Hugging Face transformers itself as the reference
// for the target architectures: tiny random-weight checkpoints that
// scripts/hfref/tiny.py makes and saves with transformers' own config and
// model classes (so their tensor names and config.json keys are what real
// checkpoints carry, a bf16 one sharded), and transformers' float32 logits
// and greedy ids on fixed prompts (reference.json).
//
// The checkpoints are generated once, by build/pyenv's Python (torch and
// transformers, installed by scripts/setup.sh), into build/hfref/KEY, KEY a
// hash of tiny.py and the tokenizer files it copies: a rerun finds them there
// in milliseconds, and an edit of the script makes new ones. Two test
// processes (go test runs packages in parallel) may generate at once: each
// writes into a temporary folder beside the cache and renames it into place;
// the loser of the rename deletes its copy and uses the winner's.
//
// Archs is the one table of what drafter supports among them: the model
// test compares drafter's forward with transformers on each, the command
// test runs the pipeline on each, and both require every other
// architecture's loading to be refused.
package hfref

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// Arch is one tiny architecture drafter supports, by its folder name in the
// cache (the model_type, or a variant: phi3_longrope for Phi-3 with
// LongRoPE, deepseek_v3_yarn for DeepSeek-V3 with yarn and q_proj).
type Arch struct {
	Name string
	// MXFP4 means the architecture also has an mxfp4 folder: its experts
	// stored as MXFP4 blocks and scales (gpt_oss).
	MXFP4 bool
}

// Shipped returns the folder of the checkpoint as the architecture's
// models ship: mxfp4 where it has one (gpt-oss's experts), else bf16.
func (a Arch) Shipped() string {
	if a.MXFP4 {
		return "mxfp4"
	}
	return "bf16"
}

// DTypes returns the architecture's checkpoint folders: DTypes, and mxfp4
// where it has one.
func (a Arch) DTypes() []string {
	if a.MXFP4 {
		return append(slices.Clip(DTypes), "mxfp4")
	}
	return DTypes
}

// Archs are the supported architectures the tests compare with
// transformers. Adding an architecture to pkg/arch means adding its line
// here (the tests fail while a model_type that pkg/arch knows has none).
var Archs = []Arch{
	{Name: "llama"},
	{Name: "mistral"},
	{Name: "qwen2"},
	{Name: "qwen3"},
	{Name: "gemma2"},
	{Name: "gemma3_text"},
	{Name: "phi3"},
	{Name: "phi3_longrope"},
	{Name: "mixtral"},
	{Name: "qwen3_moe"},
	{Name: "deepseek_v3"},
	{Name: "deepseek_v3_yarn"},
	{Name: "gpt_oss", MXFP4: true},
}

// Supported reports whether the folder name is in Archs.
func Supported(name string) bool {
	return slices.ContainsFunc(Archs, func(a Arch) bool { return a.Name == name })
}

// Prompt is one reference prompt.
type Prompt struct {
	IDs       []int `json:"ids"`
	NewTokens int   `json:"new_tokens"`
}

// Run is transformers' output on one prompt.
type Run struct {
	// Logits is [len(IDs)][vocab]: every position's float32 logits
	// (9 significant digits: the float32 values exactly).
	Logits [][]float64 `json:"logits"`
	// GreedyIDs are NewTokens greedy ids after the prompt, from a cached
	// decode loop; GreedyGaps the top-1 minus top-2 logit at each step.
	GreedyIDs  []int     `json:"greedy_ids"`
	GreedyGaps []float64 `json:"greedy_gaps"`
}

// Reference is one architecture's reference.json.
type Reference struct {
	Name                string   `json:"name"`
	ModelType           string   `json:"model_type"`
	TransformersVersion string   `json:"transformers_version"`
	TorchVersion        string   `json:"torch_version"`
	Greedy              string   `json:"greedy"`
	MinGap              float64  `json:"min_gap"`
	Prompts             []Prompt `json:"prompts"`
	// F32 and BF16 are transformers' runs of the f32 checkpoint and of the
	// bf16 checkpoint loaded as float32, one per prompt.
	F32  []Run `json:"f32"`
	BF16 []Run `json:"bf16"`
	// MXFP4 is the runs of a checkpoint whose experts are stored MXFP4
	// (gpt_oss only): the f32 runs, its weights being exactly the f32
	// checkpoint's.
	MXFP4 []Run `json:"mxfp4"`
	// Parameters is transformers' count (a tied embedding once);
	// MatrixParameters those of its weight matrices (two or more
	// dimensions, biases excepted); MXFP4Parameters those of the expert
	// matrices an mxfp4 checkpoint stores as MXFP4.
	Parameters       int64 `json:"parameters"`
	MatrixParameters int64 `json:"matrix_parameters"`
	MXFP4Parameters  int64 `json:"mxfp4_parameters"`
	// PersistentBuffers counts the values of the buffers the checkpoint
	// stores (DeepSeek's e_score_correction_bias), which a loaded model
	// holds but transformers does not count as parameters.
	PersistentBuffers int64          `json:"persistent_buffers"`
	Features          map[string]any `json:"features"`
}

// Runs returns the runs of dtype "f32" or "bf16".
func (r *Reference) Runs(dtype string) []Run {
	switch dtype {
	case "bf16":
		return r.BF16
	case "mxfp4":
		return r.MXFP4
	}
	return r.F32
}

// DTypes are the checkpoint folders of every architecture.
var DTypes = []string{"f32", "bf16"}

// Cache is the generated checkpoints.
type Cache struct {
	// Dir holds one folder per architecture: NAME/f32, NAME/bf16 and
	// NAME/reference.json.
	Dir string
}

// Names returns every generated architecture, sorted.
func (c *Cache) Names(t testing.TB) []string {
	t.Helper()
	es, err := os.ReadDir(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no architectures", c.Dir)
	}
	return out
}

// Model returns the checkpoint folder of an architecture in a dtype.
func (c *Cache) Model(name, dtype string) string { return filepath.Join(c.Dir, name, dtype) }

// Reference reads an architecture's reference.json and checks that it
// holds one run per prompt in each dtype, each with every position's
// logits and NewTokens greedy ids.
func (c *Cache) Reference(t testing.TB, name string) *Reference {
	t.Helper()
	path := filepath.Join(c.Dir, name, "reference.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r Reference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, dt := range DTypes {
		runs := r.Runs(dt)
		if len(runs) != len(r.Prompts) || len(runs) == 0 {
			t.Fatalf("%s: %d %s runs for %d prompts", path, len(runs), dt, len(r.Prompts))
		}
		for i, p := range r.Prompts {
			if len(runs[i].Logits) != len(p.IDs) || len(runs[i].GreedyIDs) != p.NewTokens {
				t.Fatalf("%s: %s prompt %d: %d logit rows and %d greedy ids for %d ids and %d new tokens",
					path, dt, i, len(runs[i].Logits), len(runs[i].GreedyIDs), len(p.IDs), p.NewTokens)
			}
		}
	}
	return &r
}

var (
	mu     sync.Mutex
	cached *Cache
)

// Checkpoints returns the generated checkpoints, generating them on the
// first call of a process when build/hfref has none for this tiny.py. Only
// then is Python needed: it skips the test when build/pyenv has no Python
// with torch and transformers (scripts/setup.sh installs them), and fails
// instead when DRAFTER_REQUIRE_PYTHON=1 (CI).
func Checkpoints(t testing.TB) *Cache {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if cached != nil {
		return cached
	}
	root := testutil.Root()
	script := filepath.Join(root, "scripts", "hfref", "tiny.py")
	key, err := cacheKey(script, filepath.Join(root, "models", "stories260k"))
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(root, "build", "hfref")
	dir := filepath.Join(base, key)
	// Generated files need no Python: a machine without it (a GPU machine
	// handed build/hfref) runs the comparison on them.
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		cached = &Cache{Dir: dir}
		return cached
	}
	python := filepath.Join(root, "build", "pyenv", "bin", "python")
	missing := func(why string) {
		t.Helper()
		msg := why + " (scripts/setup.sh installs torch and transformers into build/pyenv); the comparison with Hugging Face transformers cannot run"
		if os.Getenv("DRAFTER_REQUIRE_PYTHON") == "1" {
			t.Fatal("DRAFTER_REQUIRE_PYTHON=1: " + msg)
		}
		t.Skip(msg)
	}
	if _, err := os.Stat(python); err != nil {
		missing(python + " is missing")
	}
	if out, err := exec.Command(python, "-c", "import torch, transformers").CombinedOutput(); err != nil {
		missing(fmt.Sprintf("%s cannot import torch and transformers: %v: %s", python, err, lastLine(out)))
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(base, ".tmp-"+key+"-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp) // nothing to remove once renamed
	cmd := exec.Command(python, script, tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", python, script, err, out)
	} else {
		t.Logf("generated the transformers reference checkpoints in %s:\n%s", dir, out)
	}
	// The marker is written last, inside the folder before it is renamed:
	// a folder under its final name is always complete.
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp's 0700 otherwise
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another process renamed its copy first (the destination exists
		// and is not empty): use it.
		if _, serr := os.Stat(filepath.Join(dir, ".complete")); serr != nil {
			t.Fatalf("moving the reference checkpoints into place: %v", err)
		}
	}
	cached = &Cache{Dir: dir}
	return cached
}

// cacheKey hashes the script and the tokenizer files it copies into every
// checkpoint (what decides the generated files, with the versions
// scripts/setup.sh pins).
func cacheKey(script, stories string) (string, error) {
	h := sha256.New()
	for _, f := range []string{script, filepath.Join(stories, "tokenizer.json"), filepath.Join(stories, "tokenizer_config.json"),
		filepath.Join(stories, "special_tokens_map.json"), filepath.Join(stories, "generation_config.json")} {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
