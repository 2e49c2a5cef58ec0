package distill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/completions"
	"github.com/drafter-ai/drafter/pkg/completions/completionstest"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/outlock"
	"github.com/drafter-ai/drafter/pkg/sample"
)

// engineModel answers requests with the engine of its own copy of
// stories260k (a model is not shared between goroutines), one at a time:
// greedy, or sampled from the request's seed, stopping at the request's stop
// ids (the model's eos and "." when the API sends none).
func engineModel(t testing.TB) func(completions.Request) completionstest.Answer {
	tg := withPeriodStop(t, loadStories(t))
	var mu sync.Mutex
	return func(r completions.Request) completionstest.Answer {
		mu.Lock()
		defer mu.Unlock()
		stop := r.Stop
		if len(stop) == 0 {
			stop = tg.Stop
		}
		s := r.Sampling
		p := sample.Params{Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, MinP: s.MinP}
		eng, err := generate.NewEngine(tg.Model, generate.EngineOptions{Params: p, Seed: uint64(r.Seed), Stop: stop, Batch: 1,
			Capacity: len(r.Prompt) + r.MaxTokens})
		if err != nil {
			panic(err)
		}
		var a completionstest.Answer
		err = eng.Run(context.Background(), []generate.Job{{Prompt: r.Prompt, MaxNew: r.MaxTokens}}, func(d generate.Done) error {
			a.IDs = slices.Clone(d.Tokens)
			a.Finish = completions.FinishLength
			if d.Finish == generate.FinishEOS {
				a.Finish = completions.FinishStop
			}
			return nil
		})
		if err != nil {
			panic(err)
		}
		// The answer's text in the context of the prompt, as engines
		// detokenize (a standalone decode would drop a leading space).
		a.Text = strings.TrimPrefix(tg.Tok.Decode(append(slices.Clone(r.Prompt), a.IDs...), true), tg.Tok.Decode(r.Prompt, true))
		return a
	}
}

// remoteOptions are baseOptions generating through the servers at urls.
func remoteOptions(prompts, out string, urls ...string) Options {
	opt := baseOptions(prompts, out)
	opt.Generator = &completions.Options{URLs: urls, Concurrency: 4, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	return opt
}

// TestRemoteGreedyEqualsLocal: greedy answers from a server running the same
// model give the same responses as a local distill, token for token; the
// teacher-forced states equal the generating passes' to rounding; the manifest
// records the generator.
func TestRemoteGreedyEqualsLocal(t *testing.T) {
	tg := withPeriodStop(t, loadStories(t))
	srv := completionstest.New(completionstest.Options{Generate: engineModel(t), Model: "stories", OwnedBy: "fake"})
	defer srv.Close()
	dir := t.TempDir()
	prompts := promptFile(t, dir)
	local := baseOptions(prompts, filepath.Join(dir, "local"))
	local.Sampling.Temperature = f64p(0)
	local.Batch = 2
	if _, err := Run(context.Background(), tg, local); err != nil {
		t.Fatal(err)
	}
	remote := remoteOptions(prompts, filepath.Join(dir, "remote"), srv.URL)
	remote.Sampling.Temperature = f64p(0)
	remote.Batch = 3
	sum, err := Run(context.Background(), tg, remote)
	if err != nil {
		t.Fatal(err)
	}
	lr, rr := readResponses(t, local.Out), readResponses(t, remote.Out)
	if !slices.EqualFunc(lr, rr, respEqual) {
		t.Fatalf("responses differ:\nlocal  %+v\nremote %+v", lr[0], rr[0])
	}
	eos := 0
	for _, r := range rr {
		if r.FinishReason == generate.FinishEOS {
			eos++
		}
	}
	if eos == 0 || eos == len(rr) {
		t.Fatalf("%d of %d responses ended at a stop id; want both endings", eos, len(rr))
	}
	ls, rs := readCapture(t, local.Out), readCapture(t, remote.Out)
	if len(ls) != len(rs) {
		t.Fatalf("%d samples stored, want %d", len(rs), len(ls))
	}
	for id, a := range ls {
		b := rs[id]
		if !slices.Equal(a.tokens, b.tokens) || !slices.Equal(a.mask, b.mask) {
			t.Fatalf("sample %d: tokens or mask differ", id)
		}
		for c := range a.states {
			for k := range a.states[c] {
				if d := math.Abs(float64(a.states[c][k] - b.states[c][k])); d > 1e-4 {
					t.Fatalf("sample %d column %d: local %g, remote %g", id, c, a.states[c][k], b.states[c][k])
				}
			}
		}
	}
	man := sum.Manifest
	if man.Args["generator_model"] != "stories" || man.Args["generator_token_ids"] != "token_ids" || man.Args["generator_api"] != "openai" {
		t.Fatalf("manifest args %v", man.Args)
	}
	// The generation block is held as manifest.json holds it (decoded JSON),
	// so that a resumed run writes the same bytes.
	var g completions.Info
	b, _ := json.Marshal(man.Generation.(map[string]any)["generator"])
	if err := json.Unmarshal(b, &g); err != nil || g.Model != "stories" || g.Source != completions.SourceTokenIDs || len(g.URLs) != 1 || g.Servers[0].OwnedBy != "fake" {
		t.Fatalf("manifest generator %+v (%v)", g, err)
	}
	onDisk, err := capture.ReadManifest(remote.Out)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(onDisk.Generation)
	if !strings.Contains(string(b), `"token_id_source":"token_ids"`) || !strings.Contains(string(b), srv.URL) {
		t.Fatalf("manifest.json generation: %s", b)
	}
}

// TestRemoteEverySource: sampled answers read from every id layout and API
// give the same samples as token_ids; a text-only server's answers are
// re-tokenized and either equal them or are skipped with a reason.
func TestRemoteEverySource(t *testing.T) {
	tg := withPeriodStop(t, loadStories(t))
	dir := t.TempDir()
	prompts := promptFile(t, dir)
	run := func(name string, api completions.API, src completions.Source) (*Summary, []Response) {
		srv := completionstest.New(completionstest.Options{API: api, Source: src, Generate: engineModel(t),
			Tokenize: func(s string) []int { return tg.Tok.Encode(s, true) }})
		defer srv.Close()
		opt := remoteOptions(prompts, filepath.Join(dir, name), srv.URL)
		opt.Generator.API = api
		opt.Sampling.MinP = f64p(0) // TGI has none
		sum, err := Run(context.Background(), tg, opt)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return sum, readResponses(t, opt.Out)
	}
	_, ref := run("ref", completions.OpenAI, completions.SourceTokenIDs)
	byID := map[int64]Response{}
	for _, r := range ref {
		byID[r.ID] = r
	}
	for _, tc := range []struct {
		api completions.API
		src completions.Source
	}{
		{completions.OpenAI, completions.SourceLogprobTokens},
		{completions.OpenAI, completions.SourceLogprobIDs},
		{completions.LlamaCpp, completions.SourceTokens},
		{completions.TGI, completions.SourceDetails},
		{completions.OpenAI, completions.SourceText},
	} {
		sum, got := run(string(tc.api)+"-"+strings.ReplaceAll(string(tc.src), ".", "-"), tc.api, tc.src)
		if sum.Manifest.Args["generator_token_ids"] != string(tc.src) {
			t.Fatalf("%s: manifest records %q", tc.src, sum.Manifest.Args["generator_token_ids"])
		}
		for _, r := range got {
			if !respEqual(r, byID[r.ID]) {
				t.Fatalf("%s/%s: sample %d: %v, want %v", tc.api, tc.src, r.ID, r.ResponseIDs, byID[r.ID].ResponseIDs)
			}
		}
		if len(got)+sum.Rejected != len(ref) || (tc.src != completions.SourceText && sum.Rejected != 0) {
			t.Fatalf("%s/%s: %d samples and %d skipped, want %d", tc.api, tc.src, len(got), sum.Rejected, len(ref))
		}
		t.Logf("%s/%s: %d samples, %d skipped", tc.api, tc.src, len(got), sum.Rejected)
	}
}

// TestRemoteFaultsExactlyOnce: servers that drop connections, answer 429 and
// 500 and answer late: the distill completes with every sample exactly once,
// byte for byte what a fault-free run stores.
func TestRemoteFaultsExactlyOnce(t *testing.T) {
	tg := withPeriodStop(t, loadStories(t))
	faults := completionstest.Faults{Seed: 3, Drop: 0.15, TooMany: 0.15, ServerError: 0.15, Slow: 0.1, SlowDelay: time.Minute, RetryAfter: "0"}
	a := completionstest.New(completionstest.Options{Generate: engineModel(t), Faults: faults})
	defer a.Close()
	faults.Seed = 4
	b := completionstest.New(completionstest.Options{Generate: engineModel(t), Faults: faults})
	defer b.Close()
	clean := completionstest.New(completionstest.Options{Generate: engineModel(t)})
	defer clean.Close()
	dir := t.TempDir()
	prompts := promptFile(t, dir)
	ref := remoteOptions(prompts, filepath.Join(dir, "ref"), clean.URL)
	ref.Batch, ref.ShardRows = 3, 100
	if _, err := Run(context.Background(), tg, ref); err != nil {
		t.Fatal(err)
	}
	opt := remoteOptions(prompts, filepath.Join(dir, "faulty"), a.URL, b.URL)
	opt.Batch, opt.ShardRows = 3, 100
	opt.Generator.Timeout, opt.Generator.MaxAttempts = 2*time.Second, 12
	if _, err := Run(context.Background(), tg, opt); err != nil {
		t.Fatal(err)
	}
	// The manifests differ in the servers they record, and only there.
	compareCaptures(t, ref.Out, opt.Out)
	withoutServers := func(dir string) string {
		var m map[string]any
		b, err := os.ReadFile(filepath.Join(dir, capture.ManifestName))
		if err != nil || json.Unmarshal(b, &m) != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		delete(m["generation"].(map[string]any), "generator")
		delete(m, "sha256") // over the whole manifest, servers included
		b, _ = json.Marshal(m)
		return string(b)
	}
	if a, b := withoutServers(ref.Out), withoutServers(opt.Out); a != b {
		t.Fatalf("the manifests differ beyond the generator:\n%s\n%s", a, b)
	}
	got := readResponses(t, opt.Out)
	for i, r := range got {
		if r.ID != int64(i) {
			t.Fatalf("line %d holds sample %d", i, r.ID)
		}
	}
	if len(got) != 2*len(storyPrompts) {
		t.Fatalf("%d samples", len(got))
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.Dropped+sb.Dropped == 0 || sa.TooMany+sb.TooMany == 0 || sa.ServerErrors+sb.ServerErrors == 0 || sa.Slow+sb.Slow == 0 {
		t.Fatalf("not every fault happened: %+v %+v", sa, sb)
	}
}

// TestRemoteResumeReplaysAnswers: a run cancelled midway, with answers
// received but not yet captured and samples skipped, resumes without asking
// for what it recorded (generated.jsonl holds each answer once), and ends
// with the bytes of an uninterrupted run.
func TestRemoteResumeReplaysAnswers(t *testing.T) {
	tg := withPeriodStop(t, loadStories(t))
	tokenize := func(s string) []int {
		ids := tg.Tok.Encode(s, true)
		if strings.HasPrefix(s, "The") { // this server tokenizes these prompts its own way
			ids = append(ids, 0)
		}
		return ids
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	calls, cancelAt := 0, 0
	gen := engineModel(t)
	model := func(r completions.Request) completionstest.Answer {
		mu.Lock()
		calls++
		if calls == cancelAt {
			cancel()
		}
		mu.Unlock()
		return gen(r)
	}
	srv := completionstest.New(completionstest.Options{API: completions.TGI, Generate: model, Tokenize: tokenize})
	defer srv.Close()
	dir := t.TempDir()
	prompts := promptFile(t, dir)
	mk := func(name string) Options {
		opt := remoteOptions(prompts, filepath.Join(dir, name), srv.URL)
		opt.Generator.API = completions.TGI
		opt.Sampling.MinP = f64p(0)
		opt.Batch, opt.ShardRows = 2, 60
		return opt
	}
	ref := mk("ref")
	sum, err := Run(context.Background(), tg, ref)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rejected == 0 {
		t.Fatal("no sample was skipped; the test proves less than it should")
	}
	opt := mk("resumed")
	mu.Lock()
	calls, cancelAt = 0, 15
	mu.Unlock()
	if _, err := Run(ctx, tg, opt); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("cancelled run: %v", err)
	}
	recorded := len(readLines(t, filepath.Join(opt.Out, GeneratedName)))
	if recorded == 0 {
		t.Fatal("nothing recorded before the cancellation")
	}
	sum2, err := Run(context.Background(), tg, opt)
	if err != nil {
		t.Fatal(err)
	}
	if sum2.Rejected != sum.Rejected {
		t.Fatalf("skipped %d, uninterrupted %d", sum2.Rejected, sum.Rejected)
	}
	// An answer asked for again would be recorded twice.
	compareDirs(t, ref.Out, opt.Out)
	compareFiles(t, ref.Out, opt.Out, GeneratedName)
}

func readLines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestRemoteRefusesOtherRuns: a local distill is not resumed by a remote one,
// and a bad server is reported before anything is written.
func TestRemoteRefusesOtherRuns(t *testing.T) {
	tg := loadStories(t)
	srv := completionstest.New(completionstest.Options{Generate: engineModel(t), Model: "served"})
	defer srv.Close()
	dir := t.TempDir()
	prompts := promptFile(t, dir)
	local := baseOptions(prompts, filepath.Join(dir, "out"))
	if _, err := Run(context.Background(), tg, local); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), tg, remoteOptions(prompts, local.Out, srv.URL))
	if err == nil || !strings.Contains(err.Error(), "generator") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("remote resume of a local distill: %v", err)
	}
	bad := remoteOptions(prompts, filepath.Join(dir, "bad"), srv.URL)
	bad.Generator.Model = "other"
	_, err = Run(context.Background(), tg, bad)
	if err == nil || !strings.Contains(err.Error(), `does not serve model "other"`) {
		t.Fatalf("wrong model: %v", err)
	}
	if _, err := os.Stat(bad.Out); !os.IsNotExist(err) {
		t.Fatalf("a run refused at the start left %s behind (%v)", bad.Out, err)
	}
}

// TestRemoteKillAndResume runs the real binary against a fake server that
// answers slowly, SIGKILLs it at several moments (during requests, before and
// after shards appear), reruns the same command each time, and compares the
// final shards, responses and recorded answers byte for byte with an
// uninterrupted run.
func TestRemoteKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the drafter binary")
	}
	faults := completionstest.Faults{Seed: 5, Slow: 0.3, SlowDelay: 20 * time.Millisecond, ServerError: 0.1}
	srv := completionstest.New(completionstest.Options{Generate: engineModel(t), Faults: faults})
	defer srv.Close()
	dir := t.TempDir()
	bin := buildDrafter(t, dir)
	prompts := promptFile(t, dir)
	args := func(out string) []string {
		return []string{"distill", "--model", testutil.Stories260k(), "--prompts", prompts, "--out", out, "--quiet",
			"--temperature", "0.9", "--max-new-tokens", "40", "--samples-per-prompt", "6", "--seed", "5",
			"--batch", "3", "--shard-rows", "150", "--dtype", "float16", "--generator", srv.URL, "--concurrency", "3"}
	}
	// Kill once a number of answers is recorded (requests in flight), and
	// after shards.
	answers := func(n int) func(out string) bool {
		return func(out string) bool {
			b, err := os.ReadFile(filepath.Join(out, GeneratedName))
			return err == nil && bytes.Count(b, []byte("\n")) >= n
		}
	}
	killAndResume(t, bin, dir, args, 4, []func(string) bool{answers(5), afterShard(1), answers(30), afterShard(3), answers(50)}, GeneratedName)
}

// buildDrafter builds the drafter binary into dir.
func buildDrafter(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "drafter")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/drafter")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestRemoteTGIChat: TGI adds BOS to the text it is sent, so a chat prompt,
// whose template writes BOS itself, is sent without it; TGI's prefill then
// equals the prompt's ids and no sample is skipped.
func TestRemoteTGIChat(t *testing.T) {
	tg := chatModel(t)
	srvTok := chatModel(t).Tok
	srv := completionstest.New(completionstest.Options{API: completions.TGI, Generate: engineModel(t),
		Tokenize: func(s string) []int { return srvTok.Encode(s, true) }})
	defer srv.Close()
	dir := t.TempDir()
	opt := remoteOptions(chatPromptFile(t, dir), filepath.Join(dir, "d"), srv.URL)
	opt.Generator.API = completions.TGI
	opt.Sampling.MinP = f64p(0)
	sum, err := Run(context.Background(), tg, opt)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rejected != 0 || sum.Manifest.Totals.Samples != 8 {
		t.Fatalf("%d samples stored, %d skipped; want 8 and 0", sum.Manifest.Totals.Samples, sum.Rejected)
	}
	for _, r := range readResponses(t, opt.Out) {
		if len(r.Messages) != 2 || r.Messages[1].Role != "assistant" {
			t.Fatalf("sample %d messages %+v", r.ID, r.Messages)
		}
	}
}

// TestGeneratedTornLine: a line cut short by a kill is dropped (its answer is
// asked for again), and the file stays valid JSONL.
func TestGeneratedTornLine(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, GeneratedName, `{"id":0,"request":"a","response_ids":[5,2],"finish_reason":"eos"}`+"\n"+
		`{"id":1,"request":"b","skipped":"no"}`+"\n"+`{"id":2,"request":"c","respon`)
	g, err := openGenerated(dir, false, map[int64]struct{}{}, 512)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.lines) != 2 || g.lines[1].Skipped != "no" || !slices.Equal(g.lines[0].IDs, []int{5, 2}) {
		t.Fatalf("lines %+v", g.lines)
	}
	if err := g.add(generatedLine{ID: 2, Request: "c", IDs: []int{7}, Finish: "length"}); err != nil {
		t.Fatal(err)
	}
	if err := g.close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 3 || lines[2] != `{"id":2,"request":"c","response_ids":[7],"finish_reason":"length"}` {
		t.Fatalf("file after reopening and appending:\n%s", strings.Join(lines, "\n"))
	}
	writeFile(t, dir, GeneratedName, `{"id":0,"request":"a","skipped":"no"}`+"\nnot json\n{\"id\":1}\n")
	if _, err := openGenerated(dir, false, nil, 512); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a bad line in the middle: %v", err)
	}
}

// TestRemoteLostSkipRecords: samples skipped by a run cannot be told from
// lost ones once generated.jsonl is gone; the rerun says so instead of
// storing a different sample set.
func TestRemoteLostSkipRecords(t *testing.T) {
	tg := loadStories(t)
	tokenize := func(s string) []int {
		ids := tg.Tok.Encode(s, true)
		if strings.HasPrefix(s, "Lily") {
			ids = append(ids, 0)
		}
		return ids
	}
	srv := completionstest.New(completionstest.Options{API: completions.TGI, Generate: engineModel(t), Tokenize: tokenize})
	defer srv.Close()
	dir := t.TempDir()
	opt := remoteOptions(promptFile(t, dir), filepath.Join(dir, "out"), srv.URL)
	opt.Generator.API = completions.TGI
	opt.Sampling.MinP = f64p(0)
	sum, err := Run(context.Background(), tg, opt)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rejected != 2 {
		t.Fatalf("%d skipped, want the 2 samples of prompt 1", sum.Rejected)
	}
	if err := os.Remove(filepath.Join(opt.Out, GeneratedName)); err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), tg, opt)
	if err == nil || !strings.Contains(err.Error(), "does not say it was skipped") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("rerun without the records: %v", err)
	}
}

// TestRemoteHoldsTheLock: a distill through a serving engine holds its
// output folder's lock for the whole run: a second distill into the same
// folder, remote or local, is refused at once, before it sends any request,
// and the first completes exactly as if it had been alone.
func TestRemoteHoldsTheLock(t *testing.T) {
	tg := loadStories(t)
	srv := completionstest.New(completionstest.Options{Generate: engineModel(t)})
	defer srv.Close()
	dir := t.TempDir()
	prompts := promptFile(t, dir)
	ref := remoteOptions(prompts, filepath.Join(dir, "ref"), srv.URL)
	if _, err := Run(context.Background(), tg, ref); err != nil {
		t.Fatal(err)
	}
	first := remoteOptions(prompts, filepath.Join(dir, "out"), srv.URL)
	release := startGated(t, tg, first)
	asked := srv.Stats().Requests
	var be *outlock.BusyError
	for _, second := range []Options{remoteOptions(prompts, first.Out, srv.URL), baseOptions(prompts, first.Out)} {
		second.Force = true
		_, err := Run(context.Background(), tg, second)
		if !errors.As(err, &be) || !strings.HasPrefix(err.Error(), "distill: "+first.Out+` is in use by "drafter distill" (pid `) {
			t.Fatalf("second distill (generator %v) into the same --out: %v", second.Generator != nil, err)
		}
	}
	if n := srv.Stats().Requests; n != asked {
		t.Fatalf("the refused runs sent %d requests", n-asked)
	}
	if err := release(); err != nil {
		t.Fatalf("first distill: %v", err)
	}
	compareDirs(t, ref.Out, first.Out)
	compareFiles(t, ref.Out, first.Out, GeneratedName)
	if _, err := os.Stat(filepath.Join(first.Out, outlock.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file left after the run: %v", err)
	}
}

// TestRetryNotices: a retry is reported with the server, the attempt, the
// reason and the wait, at most one line per server per interval, the
// retries in between counted on the next line.
func TestRetryNotices(t *testing.T) {
	var b strings.Builder
	n := newRetryNotices(&b, time.Hour)
	r := completions.Retry{URL: "http://a:8000", Attempt: 1, MaxAttempts: 8, Err: errors.New("connection refused"), Wait: 500 * time.Millisecond}
	n.note(r)
	r.Attempt = 2
	n.note(r)
	n.note(completions.Retry{URL: "http://b:8000", Attempt: 1, MaxAttempts: 8, Err: errors.New("429 Too Many Requests"), Wait: time.Second})
	out := b.String()
	if !strings.Contains(out, "http://a:8000: attempt 1 of 8 failed: connection refused; retrying in 500ms") ||
		!strings.Contains(out, "http://b:8000: attempt 1 of 8 failed: 429 Too Many Requests; retrying in 1s") ||
		strings.Count(out, "http://a:8000") != 1 {
		t.Fatalf("notices:\n%s", out)
	}
	n.interval = 0
	r.Attempt = 3
	n.note(r)
	if !strings.Contains(b.String(), "attempt 3 of 8 failed: connection refused; retrying in 500ms (and 1 more retries since the last notice)") {
		t.Fatalf("notices:\n%s", b.String())
	}
	// A Retry-After cut to MaxRetryAfter is said, however recent the last
	// notice of the server.
	n.interval = time.Hour
	n.note(completions.Retry{URL: "http://a:8000", Attempt: 4, MaxAttempts: 8, Err: errors.New("429 Too Many Requests"),
		Wait: completions.MaxRetryAfter, Asked: time.Hour})
	if !strings.Contains(b.String(), "attempt 4 of 8 failed: 429 Too Many Requests; retrying in 1m0s (the server asked for 1h0m0s; waits are capped at 1m0s)") {
		t.Fatalf("notices:\n%s", b.String())
	}
}
