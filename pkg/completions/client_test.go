package completions_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/pkg/completions"
	"github.com/drafter-ai/drafter/pkg/completions/completionstest"
)

const eos = 2

// fakeModel answers deterministically from the prompt and the seed: 1 to 7
// tokens, a third of them ending with eos.
func fakeModel(r completions.Request) completionstest.Answer {
	sum := 0
	for _, id := range r.Prompt {
		sum += id
	}
	n := min(1+int(r.Seed%7), r.MaxTokens)
	ids := make([]int, n)
	for i := range ids {
		ids[i] = 10 + (sum+int(r.Seed)*31+i*17)%50
	}
	a := completionstest.Answer{IDs: ids, Finish: completions.FinishLength}
	if r.Seed%3 == 0 {
		a.IDs[n-1], a.Finish = eos, completions.FinishStop
	}
	a.Text = fakeText(a.IDs)
	return a
}

// fakeText is the fake tokenizer's decoding: one letter per id, eos dropped.
func fakeText(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		if id != eos {
			b.WriteByte(byte('A' + id - 10))
		}
	}
	return b.String()
}

func fakeEncode(s string) []int {
	ids := make([]int, len(s))
	for i := range s {
		ids[i] = int(s[i]-'A') + 10
	}
	return ids
}

func request(i int) completions.Request {
	return completions.Request{Key: uint64(i), Prompt: []int{1, 20 + i%13, 30 + i%7}, MaxTokens: 6, Seed: int64(1 + i*7919%completions.MaxSeed),
		Sampling: completions.Sampling{Temperature: 0.8, TopP: 0.95}, Stop: []int{eos}}
}

func newClient(t *testing.T, opt completions.Options) *completions.Client {
	t.Helper()
	if opt.Backoff == 0 {
		opt.Backoff, opt.MaxBackoff = time.Millisecond, 5*time.Millisecond
	}
	c, err := completions.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRunSurvivesFaults: two servers that drop connections, answer 429 and
// 500 and answer too slowly some of the time, plus a URL where nothing
// listens; every request is handed to the caller exactly once, in order, with
// the model's answer.
func TestRunSurvivesFaults(t *testing.T) {
	faults := completionstest.Faults{Seed: 7, Drop: 0.12, TooMany: 0.12, ServerError: 0.12, Slow: 0.08, SlowDelay: time.Minute, RetryAfter: "0"}
	a := completionstest.New(completionstest.Options{Generate: fakeModel, Faults: faults})
	defer a.Close()
	faults.Seed = 8
	b := completionstest.New(completionstest.Options{Generate: fakeModel, Faults: faults})
	defer b.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()

	// An attempt at a live server fails with probability 0.44 (the faults
	// above), one at the dead URL always, and the dead URL takes a third of
	// the attempts at the most (it rests after each failure). 30 attempts
	// then all fail with probability below 0.63^30 = 1e-6 per request, 2e-4
	// per run of 200: giving up would be the test's error, not the client's
	// (12 attempts failed one run in a few dozen).
	c := newClient(t, completions.Options{URLs: []string{a.URL, deadURL + "/v1", b.URL + "/"}, Model: "fake-model",
		Concurrency: 8, Timeout: time.Second, MaxAttempts: 30})
	const n = 200
	var got []int
	err := c.Run(context.Background(), n, request, func(i int, r *completions.Response, err error) error {
		if err != nil {
			return err
		}
		got = append(got, i)
		want := fakeModel(request(i))
		if !slices.Equal(r.IDs, want.IDs) || r.Finish != want.Finish || r.Source != completions.SourceTokenIDs {
			return fmt.Errorf("request %d: got %v %s from %s, want %v %s", i, r.IDs, r.Finish, r.Source, want.IDs, want.Finish)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if g != i {
			t.Fatalf("answer %d handed over as %d", i, g)
		}
	}
	if len(got) != n {
		t.Fatalf("%d answers, want %d", len(got), n)
	}
	sa, sb := a.Stats(), b.Stats()
	for name, v := range map[string]int{"dropped": sa.Dropped + sb.Dropped, "429": sa.TooMany + sb.TooMany,
		"500": sa.ServerErrors + sb.ServerErrors, "slow": sa.Slow + sb.Slow} {
		if v == 0 {
			t.Fatalf("no %s answer happened; the test proved nothing", name)
		}
	}
	if sa.Answered == 0 || sb.Answered == 0 {
		t.Fatalf("answers %d and %d: the load was not spread", sa.Answered, sb.Answered)
	}
	t.Logf("server a: %+v", withoutBodies(sa))
	t.Logf("server b: %+v", withoutBodies(sb))
}

func withoutBodies(s completionstest.Stats) completionstest.Stats {
	s.PerBody = nil
	return s
}

// TestClientErrorsAreQuoted: a 4xx other than 429 stops the run at once,
// quoting the server, without retrying.
func TestClientErrorsAreQuoted(t *testing.T) {
	cases := []struct {
		name, model string
		maxTokens   int
		want        []string
	}{
		{"wrong model", "other-model", 6, []string{"404", "The model `other-model` does not exist."}},
		{"context too long", "fake-model", 100, []string{"400", "maximum context length is 40 tokens", "103 tokens"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A server of its own: requests the previous case cancelled may
			// still reach a shared one after that case ended.
			srv := completionstest.New(completionstest.Options{Generate: fakeModel, MaxContext: 40})
			defer srv.Close()
			c := newClient(t, completions.Options{URLs: []string{srv.URL}, Model: tc.model, MaxAttempts: 5})
			err := c.Run(context.Background(), 20, func(i int) completions.Request {
				r := request(i)
				r.MaxTokens = tc.maxTokens
				return r
			}, func(int, *completions.Response, error) error { return nil })
			var se *completions.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a StatusError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
			if n := srv.Stats().Requests; n > 8 {
				t.Fatalf("%d requests reached the server: the client retried or went on after a 4xx", n)
			}
			t.Log(err)
		})
	}
}

// TestCancelStopsPromptly: cancelling the context while every request hangs
// at the server returns context.Canceled, and no request is left running.
func TestCancelStopsPromptly(t *testing.T) {
	started := make(chan struct{}, 100)
	release := make(chan struct{})
	var mu sync.Mutex
	live := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the server notices a closed connection once the body is read
		mu.Lock()
		live++
		mu.Unlock()
		defer func() {
			mu.Lock()
			live--
			mu.Unlock()
		}()
		started <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c := newClient(t, completions.Options{URLs: []string{srv.URL}, Model: "m", Concurrency: 4})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, 50, request, func(int, *completions.Response, error) error { return nil })
	}()
	for range 4 {
		<-started
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after the context was cancelled")
	}
	// The server sees the disconnects shortly after; wait for them.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := live
		mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still open at the server", n)
		}
	}
}

// TestRetryAfterIsHonoured: after a 429 with Retry-After: 1 from the only
// server, the next attempt comes at least a second later.
func TestRetryAfterIsHonoured(t *testing.T) {
	var mu sync.Mutex
	var times []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		first := len(times) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte(`{"model":"m","choices":[{"text":"A","finish_reason":"length","token_ids":[10]}],"usage":{"completion_tokens":1}}`))
	}))
	defer srv.Close()
	var retries []completions.Retry
	c := newClient(t, completions.Options{URLs: []string{srv.URL}, Model: "m",
		OnRetry: func(r completions.Retry) { retries = append(retries, r) }})
	r, err := c.Do(context.Background(), request(0))
	if err != nil {
		t.Fatal(err)
	}
	if r.Attempts != 2 || len(times) != 2 {
		t.Fatalf("%d attempts, %d requests", r.Attempts, len(times))
	}
	// The wait was announced, with the server's reason and the wait it asked for.
	if len(retries) != 1 || retries[0].Attempt != 1 || retries[0].Wait < time.Second || retries[0].URL != srv.URL ||
		!strings.Contains(retries[0].Err.Error(), "429") {
		t.Fatalf("OnRetry saw %+v; want one retry of attempt 1 on %s, waiting at least 1s after a 429", retries, srv.URL)
	}
	if d := times[1].Sub(times[0]); d < time.Second {
		t.Fatalf("retried after %v, before the server's Retry-After of 1s", d)
	}
}

// TestAPIKey: the key goes out as a Bearer token; without it the server's 401
// is quoted.
func TestAPIKey(t *testing.T) {
	srv := completionstest.New(completionstest.Options{Generate: fakeModel, APIKey: "sekret"})
	defer srv.Close()
	c := newClient(t, completions.Options{URLs: []string{srv.URL}, Model: "fake-model", APIKey: "sekret"})
	if _, err := c.Do(context.Background(), request(1)); err != nil {
		t.Fatal(err)
	}
	c = newClient(t, completions.Options{URLs: []string{srv.URL}, Model: "fake-model"})
	_, err := c.Do(context.Background(), request(1))
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "invalid API key") {
		t.Fatalf("without the key: %v", err)
	}
}

// TestEveryAPIAndSource runs the fake server in each wire format and id
// layout: the ids, the finish reason and the recorded source come back right,
// and Connect learns the model name and the source.
func TestEveryAPIAndSource(t *testing.T) {
	cases := []struct {
		api    completions.API
		source completions.Source
	}{
		{completions.OpenAI, completions.SourceTokenIDs},
		{completions.OpenAI, completions.SourceLogprobTokens},
		{completions.OpenAI, completions.SourceLogprobIDs},
		{completions.OpenAI, completions.SourceText},
		{completions.LlamaCpp, completions.SourceTokens},
		{completions.TGI, completions.SourceDetails},
	}
	tokenize := func(s string) []int { return append([]int{1}, fakeEncode(s)...) }
	for _, tc := range cases {
		t.Run(string(tc.api)+"/"+string(tc.source), func(t *testing.T) {
			srv := completionstest.New(completionstest.Options{API: tc.api, Source: tc.source, Model: "served", Generate: fakeModel, Tokenize: tokenize})
			defer srv.Close()
			c := newClient(t, completions.Options{URLs: []string{srv.URL}, API: tc.api})
			req := func(i int) completions.Request {
				r := request(i)
				r.Prompt = tokenize(fmt.Sprintf("PROMPT%c", 'A'+i%20))
				r.PromptText = fmt.Sprintf("PROMPT%c", 'A'+i%20)
				return r
			}
			info, err := c.Connect(context.Background(), req(0))
			if err != nil {
				t.Fatal(err)
			}
			if info.Model != "served" || info.Source != tc.source || c.Model() != "served" {
				t.Fatalf("Connect found %+v", info)
			}
			stops := 0
			err = c.Run(context.Background(), 30, req, func(i int, r *completions.Response, err error) error {
				if err != nil {
					return err
				}
				if err := r.Retokenize(func(s string) ([]int, error) { return fakeEncode(s), nil }, fakeText); err != nil {
					return err
				}
				want := fakeModel(req(i))
				if !slices.Equal(r.IDs, want.IDs) || r.Finish != want.Finish || r.Source != tc.source {
					return fmt.Errorf("request %d: %v %s %s, want %v %s", i, r.IDs, r.Finish, r.Source, want.IDs, want.Finish)
				}
				if r.Finish == completions.FinishStop {
					stops++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if stops == 0 || stops == 30 {
				t.Fatalf("%d of 30 stopped at eos: want both endings", stops)
			}
		})
	}
}

// TestConnectRefusesMixedServers: servers with different models, or that
// return ids differently, cannot serve one run.
func TestConnectRefusesMixedServers(t *testing.T) {
	a := completionstest.New(completionstest.Options{Generate: fakeModel, Model: "m1"})
	defer a.Close()
	b := completionstest.New(completionstest.Options{Generate: fakeModel, Model: "m2"})
	defer b.Close()
	c := completionstest.New(completionstest.Options{Generate: fakeModel, Model: "m1", Source: completions.SourceText})
	defer c.Close()
	for _, tc := range []struct {
		urls []string
		want string
	}{
		{[]string{a.URL, b.URL}, `does not serve model "m1"`},
		{[]string{a.URL, c.URL}, "returns token ids as text"},
	} {
		cl := newClient(t, completions.Options{URLs: tc.urls})
		_, err := cl.Connect(context.Background(), request(0))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Connect %v: %v, want %q", tc.urls, err, tc.want)
		}
	}
	l := completionstest.New(completionstest.Options{Generate: fakeModel, OwnedBy: "llamacpp"})
	defer l.Close()
	info, err := newClient(t, completions.Options{URLs: []string{l.URL}}).Connect(context.Background(), request(0))
	if err != nil || len(info.Warnings) != 1 || !strings.Contains(info.Warnings[0], "llamacpp API") {
		t.Fatalf("llama-server through the OpenAI API: %v, warnings %q", err, info.Warnings)
	}
}

// TestRejectsAreHandedOver: a sample whose prompt TGI tokenizes differently
// reaches the caller as a *RejectError, and the run goes on.
func TestRejectsAreHandedOver(t *testing.T) {
	tokenize := func(s string) []int {
		ids := append([]int{1}, fakeEncode(s)...)
		if strings.HasSuffix(s, "C") {
			ids = append(ids, 99) // this server tokenizes "...C" its own way
		}
		return ids
	}
	srv := completionstest.New(completionstest.Options{API: completions.TGI, Generate: fakeModel, Tokenize: tokenize})
	defer srv.Close()
	c := newClient(t, completions.Options{URLs: []string{srv.URL}, API: completions.TGI, Model: "fake-model"})
	var rejected []int
	err := c.Run(context.Background(), 10, func(i int) completions.Request {
		r := request(i)
		r.PromptText = string(rune('A' + i))
		r.Prompt = append([]int{1}, fakeEncode(r.PromptText)...)
		return r
	}, func(i int, r *completions.Response, err error) error {
		var rej *completions.RejectError
		if errors.As(err, &rej) {
			rejected = append(rejected, i)
			if !strings.Contains(err.Error(), "tokenized the prompt text") {
				return fmt.Errorf("reject reason: %v", err)
			}
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rejected, []int{2}) {
		t.Fatalf("rejected %v, want [2]", rejected)
	}
}

// TestBaseURL: the forms a server URL may take, and what is refused before
// anything is sent.
func TestBaseURL(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"http://vllm-0:8000", "http://vllm-0:8000", ""},
		{"http://x", "http://x", ""},
		{" https://gw.example/llm/v1/ ", "https://gw.example/llm", ""},
		{"http://[::1]:8080/", "http://[::1]:8080", ""},
		{"ftp://x", "", `server URL "ftp://x": want http://host:port`},
		{"vllm-0:8000", "", "want http://host:port"},
		{"http://", "", "want http://host:port"},
		{"http://h:8000/?a=1", "", "want http://host:port"},
		{"http://u:secret@h:8000", "", "carries credentials"},
	} {
		got, err := completions.BaseURL(tc.in)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("completions.BaseURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("completions.BaseURL(%q): %v; want an error with %q", tc.in, err, tc.err)
		}
	}
	if _, err := completions.New(completions.Options{URLs: []string{"http://a:1", "http://a:1/v1"}}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("the same server twice: %v", err)
	}
}
