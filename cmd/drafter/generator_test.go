package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
