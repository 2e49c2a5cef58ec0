package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/completions"
	"github.com/drafter-ai/drafter/pkg/completions/completionstest"
)

// TestGeneratorFlags: distill's generator flags reach the client options,
// the API key is read from the variable --api-key-env names, and a server
// that refuses a request for want of a key gets an error saying no key was
// sent and where drafter looked for it.
func TestGeneratorFlags(t *testing.T) {
	var got *distillOptions
	t.Setenv("DRAFTER_TEST_KEY", "k-123")
	r := runCLI(t, func(o any) error { got = o.(*distillOptions); return nil }, with(distillArgs,
		"--generator", "http://a:8000,https://b/llm/v1", "--generator-api", "llamacpp", "--generator-model", "sft",
		"--concurrency", "64", "--request-timeout", "90s", "--api-key-env", "DRAFTER_TEST_KEY")...)
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.msg)
	}
	g := got.Distill.Generator
	if g == nil || !slices.Equal(g.URLs, []string{"http://a:8000", "https://b/llm/v1"}) || g.API != completions.LlamaCpp || g.Model != "sft" ||
		g.Concurrency != 64 || g.Timeout != 90*time.Second || g.APIKey != "k-123" || got.APIKeyEnv != "DRAFTER_TEST_KEY" {
		t.Fatalf("generator options %+v (key from %s)", g, got.APIKeyEnv)
	}
	if r := runCLI(t, func(o any) error { got = o.(*distillOptions); return nil }, distillArgs...); r.code != exitOK || got.Distill.Generator != nil {
		t.Fatalf("without --generator: exit %d, generator %+v", r.code, got.Distill.Generator)
	}
	if r := runCLI(t, func(o any) error { got = o.(*distillOptions); return nil }, with(distillArgs, "--generator", "http://a:8000",
		"--allow-served-model", "sft-router")...); r.code != exitOK || got.Distill.Generator.AllowServedModel != "sft-router" {
		t.Fatalf("--allow-served-model: exit %d %q, options %+v", r.code, r.msg, got.Distill.Generator)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--allow-served-model", "x"}, "--allow-served-model applies to --generator only"},
		{[]string{"--generator", "http://a:8000", "--generator-api", "tgi", "--allow-served-model", "x"}, "--allow-served-model x: want a model name, with --generator-api openai"},
		{[]string{"--generator", "http://a:8000", "--allow-served-model", ""}, "--allow-served-model : want a model name"},
	} {
		if r := runCLI(t, func(any) error { return nil }, with(distillArgs, tc.args...)...); r.code != exitUsage || !strings.Contains(r.msg, tc.want) {
			t.Fatalf("%v: exit %d %q, want %d %q", tc.args, r.code, r.msg, exitUsage, tc.want)
		}
	}

	srv := completionstest.New(completionstest.Options{APIKey: "k-123", Generate: func(r completions.Request) completionstest.Answer {
		return completionstest.Answer{IDs: []int{300}, Text: "x", Finish: completions.FinishLength}
	}})
	defer srv.Close()
	prompts := filepath.Join("..", "..", "data", "prompts", "stories-eval.jsonl")
	for _, tc := range []struct {
		env  string
		code int
		want string
	}{
		{"DRAFTER_TEST_NO_SUCH_KEY", exitError, "401 Unauthorized: Unauthorized: invalid API key (no API key was sent: $DRAFTER_TEST_NO_SUCH_KEY is not set"},
		{"DRAFTER_TEST_KEY", exitOK, ""},
	} {
		r := runCLI(t, nil, "distill", "--model", testutil.Stories260k(), "--prompts", prompts, "--max-new-tokens", "1", "--quiet",
			"--out", filepath.Join(t.TempDir(), "d"), "--generator", srv.URL, "--api-key-env", tc.env)
		if r.code != tc.code || !strings.Contains(r.msg, tc.want) {
			t.Fatalf("--api-key-env %s: exit %d %q, want %d %q", tc.env, r.code, r.msg, tc.code, tc.want)
		}
	}
}

// TestGeneratorServedModel: answers naming another model than requested
// stop the distill (exit 1), naming both models, the server and the flag
// that accepts them; with --allow-served-model the distill completes and
// manifest.json records the served name (in args too: a resume must accept
// the same answers).
func TestGeneratorServedModel(t *testing.T) {
	srv := completionstest.New(completionstest.Options{Model: "sft", AnswerModel: "sft-router", Generate: func(r completions.Request) completionstest.Answer {
		return completionstest.Answer{IDs: []int{300}, Text: "x", Finish: completions.FinishLength}
	}})
	defer srv.Close()
	prompts := filepath.Join("..", "..", "data", "prompts", "stories-eval.jsonl")
	out := filepath.Join(t.TempDir(), "d")
	args := []string{"distill", "--model", testutil.Stories260k(), "--prompts", prompts, "--max-new-tokens", "1", "--quiet",
		"--out", out, "--generator", srv.URL}
	r := runCLI(t, nil, args...)
	for _, w := range []string{srv.URL, `"sft-router"`, `"sft"`, "--allow-served-model sft-router"} {
		if r.code != exitError || !strings.Contains(r.msg, w) {
			t.Fatalf("answers from another model: exit %d %q; want %d and %q", r.code, r.msg, exitError, w)
		}
	}
	if r := runCLI(t, nil, append(args, "--allow-served-model", "sft-router")...); r.code != exitOK {
		t.Fatalf("with --allow-served-model: exit %d %q", r.code, r.msg)
	}
	man, err := capture.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := json.Marshal(man.Generation)
	if man.Args["generator_served_model"] != "sft-router" || !strings.Contains(string(gen), `"served_model":"sft-router"`) {
		t.Fatalf("manifest args %v, generation %s", man.Args, gen)
	}
	// The same command resumes; without the flag the answers are refused
	// again.
	if r := runCLI(t, nil, append(args, "--allow-served-model", "sft-router")...); r.code != exitOK {
		t.Fatalf("rerun with --allow-served-model: exit %d %q", r.code, r.msg)
	}
	if r := runCLI(t, nil, args...); r.code != exitError || !strings.Contains(r.msg, "--allow-served-model sft-router") {
		t.Fatalf("rerun without --allow-served-model: exit %d %q", r.code, r.msg)
	}
}

// TestGeneratorHelp: the help of distill documents --allow-served-model.
func TestGeneratorHelp(t *testing.T) {
	r := runCLI(t, nil, "distill", "--help")
	if r.code != exitOK || !strings.Contains(r.out, "--allow-served-model") || !strings.Contains(r.out, "record it in manifest.json") {
		t.Fatalf("distill --help: exit %d\n%s", r.code, r.out)
	}
}

// TestGeneratorServerDownAtStart: of two --generator servers one is down;
// the distill completes with the other, and says on stderr, even with
// --quiet, which one it left out.
func TestGeneratorServerDownAtStart(t *testing.T) {
	gen := func(r completions.Request) completionstest.Answer {
		return completionstest.Answer{IDs: []int{300}, Text: "x", Finish: completions.FinishLength}
	}
	up := completionstest.New(completionstest.Options{Generate: gen})
	defer up.Close()
	down := completionstest.New(completionstest.Options{Generate: gen})
	defer down.Close()
	down.SetDown(true)
	prompts := filepath.Join("..", "..", "data", "prompts", "stories-eval.jsonl")
	r := runCLI(t, nil, "distill", "--model", testutil.Stories260k(), "--prompts", prompts, "--max-new-tokens", "1", "--quiet",
		"--out", filepath.Join(t.TempDir(), "d"), "--generator", down.URL+","+up.URL)
	if r.code != exitOK || !strings.Contains(r.stderr, down.URL+" does not answer") {
		t.Fatalf("one server down: exit %d %q, stderr:\n%s", r.code, r.msg, r.stderr)
	}
}
