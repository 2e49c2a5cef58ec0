package distill

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/pkg/completions"
	"github.com/drafter-ai/drafter/pkg/completions/completionstest"
)

// syncBuffer is a progress writer that several goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRemoteStartsWithoutADownServer: of the two --generator servers one is
// down when the run starts; the run goes ahead with the other, says which
// one does not answer, and stores what a run against the live one alone
// stores.
func TestRemoteStartsWithoutADownServer(t *testing.T) {
	tg := loadStories(t)
	up := completionstest.New(completionstest.Options{Generate: engineModel(t)})
	defer up.Close()
	down := completionstest.New(completionstest.Options{Generate: engineModel(t)})
	defer down.Close()
	down.SetDown(true)
	dir := t.TempDir()
	prompts := promptFile(t, dir)
	ref := remoteOptions(prompts, filepath.Join(dir, "ref"), up.URL)
	if _, err := Run(context.Background(), tg, ref); err != nil {
		t.Fatal(err)
	}
	opt := remoteOptions(prompts, filepath.Join(dir, "out"), down.URL, up.URL)
	var progress syncBuffer
	opt.Progress = &progress
	if _, err := Run(context.Background(), tg, opt); err != nil {
		t.Fatalf("one of two servers down at the start: %v", err)
	}
	if !strings.Contains(progress.String(), down.URL+" does not answer") {
		t.Fatalf("the progress does not say that %s does not answer:\n%s", down.URL, progress.String())
	}
	compareFiles(t, ref.Out, opt.Out, ResponsesName)
	compareFiles(t, ref.Out, opt.Out, capture.ShardFileName(0))
	t.Log(progress.String())
}

// TestRemoteServedModelRefused: answers that name another model than the one
// requested (a router in front of the engines) stop the run at the start,
// naming both models and the server, before anything is written.
func TestRemoteServedModelRefused(t *testing.T) {
	tg := loadStories(t)
	srv := completionstest.New(completionstest.Options{Generate: engineModel(t), Model: "sft", AnswerModel: "base"})
	defer srv.Close()
	dir := t.TempDir()
	opt := remoteOptions(promptFile(t, dir), filepath.Join(dir, "out"), srv.URL)
	_, err := Run(context.Background(), tg, opt)
	for _, w := range []string{srv.URL, `"sft"`, `"base"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("answers from another model: %v; want an error naming %s", err, w)
		}
	}
	t.Log(err)
	if _, err := os.Stat(opt.Out); !os.IsNotExist(err) {
		t.Fatalf("a run refused at the start left %s behind (%v)", opt.Out, err)
	}
}

// TestRemoteNothingStored: a distill whose every answer is unusable stores
// no sample, and fails saying why instead of succeeding with an empty
// capture.
func TestRemoteNothingStored(t *testing.T) {
	tg := loadStories(t)
	// This server tokenizes every prompt its own way: no answer is usable.
	tokenize := func(s string) []int { return append(tg.Tok.Encode(s, true), 0) }
	srv := completionstest.New(completionstest.Options{API: completions.TGI, Generate: engineModel(t), Tokenize: tokenize})
	defer srv.Close()
	dir := t.TempDir()
	opt := remoteOptions(promptFile(t, dir), filepath.Join(dir, "out"), srv.URL)
	opt.Generator.API = completions.TGI
	opt.Sampling.MinP = f64p(0)
	_, err := Run(context.Background(), tg, opt)
	if err == nil || !strings.Contains(err.Error(), "no sample") || !strings.Contains(err.Error(), "24 samples") ||
		!strings.Contains(err.Error(), "tokenized the prompt text") {
		t.Fatalf("every answer unusable: %v", err)
	}
	t.Log(err)
}

// TestLocalNothingStored: a distill whose every prompt is skipped (too long
// for the model's context with --skip-invalid, or none in the --shard) fails
// saying why.
func TestLocalNothingStored(t *testing.T) {
	tg := loadStories(t)
	dir := t.TempDir()
	opt := baseOptions(promptFile(t, dir), filepath.Join(dir, "out"))
	opt.SkipInvalid = true
	opt.Sampling.MaxNewTokens = intp(tg.Model.MaxPositions() - 2) // leaves room for prompts of 2 tokens at most (BOS and one)
	_, err := Run(context.Background(), tg, opt)
	if err == nil || !strings.Contains(err.Error(), "no sample") || !strings.Contains(err.Error(), "12 too long") {
		t.Fatalf("every prompt too long: %v", err)
	}
	opt = baseOptions(opt.Prompts, filepath.Join(dir, "out2"))
	opt.Shard, opt.NumShards = 20, 30
	_, err = Run(context.Background(), tg, opt)
	if err == nil || !strings.Contains(err.Error(), "no sample") || !strings.Contains(err.Error(), "--shard 20/30") {
		t.Fatalf("a shard without prompts: %v", err)
	}
	t.Log(err)
}

// TestRemoteFailureSaysHowToResume: a server lost mid-run fails the run
// naming the stage, the sample's prompt (file and line), how much is stored
// and how to resume.
func TestRemoteFailureSaysHowToResume(t *testing.T) {
	tg := loadStories(t)
	gen := engineModel(t)
	var srv *completionstest.Server
	var mu sync.Mutex
	calls := 0
	srv = completionstest.New(completionstest.Options{Generate: func(r completions.Request) completionstest.Answer {
		mu.Lock()
		calls++
		if calls == 12 {
			srv.SetDown(true) // for good: every later attempt fails
		}
		mu.Unlock()
		return gen(r)
	}})
	defer srv.Close()
	dir := t.TempDir()
	opt := remoteOptions(promptFile(t, dir), filepath.Join(dir, "out"), srv.URL)
	opt.Generator.Concurrency = 1
	opt.Batch, opt.ShardRows = 2, 60
	_, err := Run(context.Background(), tg, opt)
	for _, w := range []string{"--generator", opt.Prompts + " line ", "of 24 samples are stored", "rerun the same command to resume"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("a server lost mid-run: %v; want %q", err, w)
		}
	}
	t.Log(err)
}

// TestRemoteRefusalNamesPrompt: a request the server refuses (a prompt too
// long for its context) names the prompt's file and line, not a request
// number.
func TestRemoteRefusalNamesPrompt(t *testing.T) {
	tg := loadStories(t)
	// 10 tokens of context: the first prompt fits with the 1-token probe but
	// not with its 24-token budget.
	srv := completionstest.New(completionstest.Options{Generate: engineModel(t), MaxContext: 10})
	defer srv.Close()
	dir := t.TempDir()
	opt := remoteOptions(promptFile(t, dir), filepath.Join(dir, "out"), srv.URL)
	opt.Generator.Concurrency = 1 // the first prompt fails first
	_, err := Run(context.Background(), tg, opt)
	if err == nil || !strings.Contains(err.Error(), opt.Prompts+" line 1") || strings.Contains(err.Error(), "request 0") ||
		!strings.Contains(err.Error(), "maximum context length") || !strings.Contains(err.Error(), "once the server accepts this request") {
		t.Fatalf("a prompt the server refuses: %v", err)
	}
	t.Log(err)
	// A server whose context does not hold the first prompt with one token
	// refuses the probe: named the same way.
	small := completionstest.New(completionstest.Options{Generate: engineModel(t), MaxContext: 3})
	defer small.Close()
	opt = remoteOptions(opt.Prompts, filepath.Join(dir, "out2"), small.URL)
	_, err = Run(context.Background(), tg, opt)
	if err == nil || !strings.Contains(err.Error(), "probe request (sample 0, "+opt.Prompts+" line 1") || !strings.Contains(err.Error(), "maximum context length") {
		t.Fatalf("a probe the server refuses: %v", err)
	}
	t.Log(err)
}

// TestRemoteCorruptedGenerated: a token id damaged in generated.jsonl is
// refused when the file is read, naming the file, the line and --force,
// not deep in a forward pass.
func TestRemoteCorruptedGenerated(t *testing.T) {
	tg := loadStories(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gen := engineModel(t)
	var mu sync.Mutex
	calls := 0
	srv := completionstest.New(completionstest.Options{Generate: func(r completions.Request) completionstest.Answer {
		mu.Lock()
		calls++
		if calls == 10 {
			cancel()
		}
		mu.Unlock()
		return gen(r)
	}})
	defer srv.Close()
	dir := t.TempDir()
	opt := remoteOptions(promptFile(t, dir), filepath.Join(dir, "out"), srv.URL)
	opt.Generator.Concurrency = 1
	opt.Batch, opt.ShardRows = 4, 1000
	if _, err := Run(ctx, tg, opt); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("cancelled run: %v", err)
	}
	path := filepath.Join(opt.Out, GeneratedName)
	lines := readLines(t, path)
	if len(lines) < 3 {
		t.Fatalf("%d answers recorded", len(lines))
	}
	var l generatedLine
	if err := json.Unmarshal([]byte(lines[2]), &l); err != nil || len(l.IDs) == 0 {
		t.Fatalf("line 3: %q (%v)", lines[2], err)
	}
	l.IDs[0] = 1 << 20
	b, _ := json.Marshal(l)
	lines[2] = string(b)
	writeFile(t, opt.Out, GeneratedName, strings.Join(lines, "\n")+"\n")
	_, err := Run(context.Background(), tg, opt)
	for _, w := range []string{path + " line 3", "1048576", "--force"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("a damaged id in %s: %v; want %q", GeneratedName, err, w)
		}
	}
	t.Log(err)
}

// TestRemoteCorruptedResponses: a resumed run prefills again the stored
// samples of its first group from responses.jsonl; a token id damaged there
// is refused naming the file, the line and --force.
func TestRemoteCorruptedResponses(t *testing.T) {
	tg := loadStories(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gen := engineModel(t)
	var mu sync.Mutex
	calls := 0
	srv := completionstest.New(completionstest.Options{Generate: func(r completions.Request) completionstest.Answer {
		mu.Lock()
		calls++
		if calls == 16 {
			cancel()
		}
		mu.Unlock()
		return gen(r)
	}})
	defer srv.Close()
	dir := t.TempDir()
	opt := remoteOptions(promptFile(t, dir), filepath.Join(dir, "out"), srv.URL)
	opt.Generator.Concurrency = 1
	opt.Batch, opt.ShardRows = 4, 70
	if _, err := Run(ctx, tg, opt); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("cancelled run: %v", err)
	}
	man, err := capture.ReadManifest(opt.Out)
	if err != nil {
		t.Fatal(err)
	}
	done := int(man.Totals.Samples)
	if done%opt.Batch == 0 {
		t.Fatalf("%d samples stored, a whole number of groups: the test needs a group to prefill again", done)
	}
	path := filepath.Join(opt.Out, ResponsesName)
	lines := readLines(t, path)
	k := done - 1 // in the group prefilled again
	var r map[string]any
	if err := json.Unmarshal([]byte(lines[k]), &r); err != nil {
		t.Fatal(err)
	}
	r["response_ids"] = []int{-7}
	b, _ := json.Marshal(r)
	lines[k] = string(b)
	writeFile(t, opt.Out, ResponsesName, strings.Join(lines, "\n")+"\n")
	_, err = Run(context.Background(), tg, opt)
	for _, w := range []string{fmt.Sprintf("%s line %d", path, k+1), "token id -7", "--force"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("a damaged id in %s: %v; want %q", ResponsesName, err, w)
		}
	}
	t.Log(err)
}
