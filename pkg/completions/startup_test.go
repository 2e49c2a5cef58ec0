package completions_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drafter-ai/drafter/pkg/completions"
	"github.com/drafter-ai/drafter/pkg/completions/completionstest"
)

// TestConnectStartsWithoutADownServer: of two servers one is down when the
// run starts (a replica restarting). Connect starts with the one that
// answers at once, instead of failing after the down one's whole retry
// budget; it says which one does not answer; the run sends it nothing while
// it is down and takes it in once it answers.
func TestConnectStartsWithoutADownServer(t *testing.T) {
	a := completionstest.New(completionstest.Options{Generate: fakeModel})
	defer a.Close()
	b := completionstest.New(completionstest.Options{Generate: fakeModel})
	defer b.Close()
	b.SetDown(true)
	var mu sync.Mutex
	var notes []string
	notify := func(msg string) {
		mu.Lock()
		notes = append(notes, msg)
		mu.Unlock()
	}
	said := func(what string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range notes {
			if strings.Contains(n, what) {
				return true
			}
		}
		return false
	}
	// The default backoff (500ms doubling to 30s, 8 attempts): the budget
	// that made a run wait 46 s before failing.
	c, err := completions.New(completions.Options{URLs: []string{b.URL, a.URL}, Timeout: 5 * time.Second, Concurrency: 2, Notify: notify})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	info, err := c.Connect(ctx, request(0))
	if err != nil {
		t.Fatalf("Connect with one of two servers down: %v", err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("Connect took %v with one server answering at once", d)
	}
	if info.Model != "fake-model" || len(info.Servers) != 2 || info.Servers[1].URL != a.URL || !info.Servers[0].Down || info.Servers[1].Down ||
		info.Source != completions.SourceTokenIDs || len(info.URLs) != 2 {
		t.Fatalf("Connect found %+v", info)
	}
	if !said(b.URL + " does not answer") {
		t.Fatalf("nothing said of the server left out: %q", notes)
	}
	// While b is down every request goes to a; once b answers a probe, it
	// takes its share.
	n := 0
	err = c.Run(ctx, 400, request, func(i int, r *completions.Response, err error) error {
		if err != nil {
			return err
		}
		if i == 20 {
			b.SetDown(false)
		}
		if r.URL == b.URL {
			n++
		}
		if i >= 20 && n == 0 {
			time.Sleep(10 * time.Millisecond) // give the probe, every 0.25 to 1 s at first, its time
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); n == 0 || st.Answered < n {
		t.Fatalf("the server back up answered %d requests (%+v); notes %q", n, withoutBodies(st), notes)
	}
	if !said(b.URL + " answers now") {
		t.Fatalf("nothing said of the server taken in: %q", notes)
	}
}

// TestConnectFailsWhenNoneAnswers: with every server down Connect fails,
// once every server's retries are spent, naming each server.
func TestConnectFailsWhenNoneAnswers(t *testing.T) {
	a := completionstest.New(completionstest.Options{Generate: fakeModel})
	defer a.Close()
	b := completionstest.New(completionstest.Options{Generate: fakeModel})
	defer b.Close()
	a.SetDown(true)
	b.SetDown(true)
	c := newClient(t, completions.Options{URLs: []string{a.URL, b.URL}, MaxAttempts: 3})
	_, err := c.Connect(context.Background(), request(0))
	if err == nil || !strings.Contains(err.Error(), a.URL) || !strings.Contains(err.Error(), b.URL) || !strings.Contains(err.Error(), "no server answers") {
		t.Fatalf("Connect with every server down: %v; want an error naming both", err)
	}
	t.Log(err)
}

// TestServedModelIsChecked: a server (a router in front of the engines) that
// answers from another model than the one requested is refused, naming both
// models and the server.
func TestServedModelIsChecked(t *testing.T) {
	srv := completionstest.New(completionstest.Options{Generate: fakeModel, AnswerModel: "other-model"})
	defer srv.Close()
	c := newClient(t, completions.Options{URLs: []string{srv.URL}})
	_, err := c.Connect(context.Background(), request(0))
	for _, w := range []string{srv.URL, `"other-model"`, `"fake-model"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("Connect to a server answering from another model: %v; want an error naming %s", err, w)
		}
	}
	var me *completions.ModelError
	if !errors.As(err, &me) || me.Served != "other-model" || me.Requested != "fake-model" {
		t.Fatalf("Connect: %v is not a ModelError", err)
	}
	c = newClient(t, completions.Options{URLs: []string{srv.URL}, Model: "fake-model"})
	if _, err := c.Do(context.Background(), request(1)); err == nil || !strings.Contains(err.Error(), `"other-model"`) {
		t.Fatalf("Do: %v", err)
	}
	if n := srv.Stats().Requests; n != 2 {
		t.Fatalf("%d requests: an answer from another model was retried", n)
	}
	// The override accepts it, and Connect records the name.
	c = newClient(t, completions.Options{URLs: []string{srv.URL}, AllowServedModel: "other-model"})
	info, err := c.Connect(context.Background(), request(0))
	if err != nil {
		t.Fatal(err)
	}
	if info.Model != "fake-model" || info.ServedModel != "other-model" || info.Servers[0].ServedModel != "other-model" {
		t.Fatalf("Connect with the override: %+v", info)
	}
	if _, err := c.Do(context.Background(), request(1)); err != nil {
		t.Fatal(err)
	}
	// A third name is still refused.
	c = newClient(t, completions.Options{URLs: []string{srv.URL}, AllowServedModel: "third-model"})
	if _, err := c.Connect(context.Background(), request(0)); !errors.As(err, &me) {
		t.Fatalf("Connect with an override naming a third model: %v", err)
	}
}

// TestServedModelOnlyWhereRequested: llama-server's native /completion and
// TGI's /generate are sent no model name, so the name their answers carry
// (llama-server reports a default) is not checked.
func TestServedModelOnlyWhereRequested(t *testing.T) {
	srv := completionstest.New(completionstest.Options{API: completions.LlamaCpp, Generate: fakeModel, AnswerModel: "gpt-3.5-turbo"})
	defer srv.Close()
	c := newClient(t, completions.Options{URLs: []string{srv.URL}, API: completions.LlamaCpp})
	if _, err := c.Connect(context.Background(), request(0)); err != nil {
		t.Fatal(err)
	}
}

// TestRetryAfterIsCapped: a Retry-After of an hour is not waited for an hour.
func TestRetryAfterIsCapped(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var retries []completions.Retry
	c := newClient(t, completions.Options{URLs: []string{srv.URL}, Model: "m", OnRetry: func(r completions.Retry) {
		mu.Lock()
		retries = append(retries, r)
		mu.Unlock()
		cancel() // the wait is announced before it starts; do not sit through it
	}})
	_, err := c.Do(ctx, request(0))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v", err)
	}
	if len(retries) != 1 || retries[0].Wait != completions.MaxRetryAfter || retries[0].Asked != time.Hour {
		t.Fatalf("retries %+v: want one wait of MaxRetryAfter, saying that an hour was asked for", retries)
	}
}

// TestConnectDoesNotWaitForAHungServer: a server that accepts connections
// but never answers holds Connect up for StartGrace at most once another
// server has answered.
func TestConnectDoesNotWaitForAHungServer(t *testing.T) {
	a := completionstest.New(completionstest.Options{Generate: fakeModel})
	defer a.Close()
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	var notes []string
	var mu sync.Mutex
	c := newClient(t, completions.Options{URLs: []string{hung.URL, a.URL}, Timeout: time.Minute, StartGrace: 200 * time.Millisecond,
		Notify: func(m string) { mu.Lock(); notes = append(notes, m); mu.Unlock() }})
	defer c.Close()
	t0 := time.Now()
	info, err := c.Connect(context.Background(), request(0))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 5*time.Second || !info.Servers[0].Down {
		t.Fatalf("Connect took %v; servers %+v", d, info.Servers)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notes) != 1 || !strings.Contains(notes[0], hung.URL+" does not answer (no answer within 200ms") {
		t.Fatalf("notes %q", notes)
	}
}

// TestLateServerUnfitStaysOut: a server down at Connect that comes up
// serving another model is not taken in, and says why once.
func TestLateServerUnfitStaysOut(t *testing.T) {
	a := completionstest.New(completionstest.Options{Generate: fakeModel})
	defer a.Close()
	b := completionstest.New(completionstest.Options{Generate: fakeModel, Model: "other-model"})
	defer b.Close()
	b.SetDown(true)
	var mu sync.Mutex
	var notes []string
	c := newClient(t, completions.Options{URLs: []string{a.URL, b.URL}, Model: "fake-model",
		Notify: func(m string) { mu.Lock(); notes = append(notes, m); mu.Unlock() }})
	defer c.Close()
	if _, err := c.Connect(context.Background(), request(0)); err != nil {
		t.Fatal(err)
	}
	b.SetDown(false)
	said := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, m := range notes {
			if strings.Contains(m, b.URL+" answers but cannot take part in this run: it serves other-model, not model \"fake-model\"") {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); said() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing said of the unfit server: %q", notes)
		}
	}
	time.Sleep(50 * time.Millisecond) // several more probes (every 5ms at most)
	err := c.Run(context.Background(), 50, request, func(int, *completions.Response, error) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if n := b.Stats().Requests; n != 0 || said() != 1 {
		t.Fatalf("the unfit server got %d requests; said %d times: %q", n, said(), notes)
	}
}
