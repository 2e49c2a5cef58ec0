package completions

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRequestBodies pins the bytes each API sends: they are what the engines'
// sources accept (see the package doc), and a pure function of the request.
func TestRequestBodies(t *testing.T) {
	r := &Request{Key: 3, Prompt: []int{1, 15043, 29892}, PromptText: "Hello,", MaxTokens: 64, Seed: 12345,
		Sampling: Sampling{Temperature: 0.7, TopP: 0.9, TopK: 0, MinP: 0.05}, Stop: []int{2, 32000}}
	greedy := *r
	greedy.Sampling = Sampling{}
	cases := []struct {
		api  API
		r    *Request
		path string
		want string
	}{
		{OpenAI, r, "/v1/completions", `{"model":"m","prompt":[1,15043,29892],"max_tokens":64,"temperature":0.7,"top_p":0.9,"top_k":-1,"min_p":0.05,"seed":12345,"stop_token_ids":[2,32000],"return_token_ids":true,"logprobs":1,"return_tokens_as_token_ids":true}`},
		{OpenAI, &greedy, "/v1/completions", `{"model":"m","prompt":[1,15043,29892],"max_tokens":64,"temperature":0,"top_p":1,"top_k":-1,"min_p":0,"seed":12345,"stop_token_ids":[2,32000],"return_token_ids":true,"logprobs":1,"return_tokens_as_token_ids":true}`},
		{LlamaCpp, r, "/completion", `{"prompt":[1,15043,29892],"n_predict":64,"temperature":0.7,"top_k":0,"top_p":0.9,"min_p":0.05,"seed":12345,"samplers":["temperature","top_k","top_p","min_p"],"repeat_penalty":1,"return_tokens":true}`},
		{TGI, &greedy, "/generate", `{"inputs":"Hello,","parameters":{"max_new_tokens":64,"do_sample":false,"details":true,"decoder_input_details":true,"return_full_text":false}}`},
	}
	tgi := *r
	tgi.Sampling.MinP, tgi.Sampling.TopK = 0, 40
	cases = append(cases, struct {
		api  API
		r    *Request
		path string
		want string
	}{TGI, &tgi, "/generate", `{"inputs":"Hello,","parameters":{"max_new_tokens":64,"do_sample":true,"temperature":0.7,"top_k":40,"top_p":0.9,"seed":12345,"details":true,"decoder_input_details":true,"return_full_text":false}}`})
	for _, tc := range cases {
		path, body, err := requestBody(tc.api, "m", tc.r)
		if err != nil {
			t.Fatal(err)
		}
		if path != tc.path || string(body) != tc.want {
			t.Fatalf("%s: %s %s\nwant %s %s", tc.api, path, body, tc.path, tc.want)
		}
		_, again, _ := requestBody(tc.api, "m", tc.r)
		if string(again) != string(body) {
			t.Fatalf("%s: the body changed between two calls", tc.api)
		}
	}
}

// TestDecodeEngineAnswers reads answers laid out as each engine writes them.
func TestDecodeEngineAnswers(t *testing.T) {
	req := &Request{Key: 1, Prompt: []int{1, 5}, MaxTokens: 8, Stop: []int{2}}
	twoStops := &Request{Key: 1, Prompt: []int{1, 5}, MaxTokens: 8, Stop: []int{2, 7}}
	cases := []struct {
		name   string
		api    API
		req    *Request
		body   string
		ids    []int
		finish string
		source Source
		cut    int
		added  bool
		err    string
	}{
		{name: "vLLM return_token_ids, eos included", api: OpenAI, req: req,
			body: `{"model":"m","choices":[{"index":0,"text":" hi","finish_reason":"stop","stop_reason":null,"token_ids":[9,4,2]}],"usage":{"prompt_tokens":2,"completion_tokens":3}}`,
			ids:  []int{9, 4, 2}, finish: FinishStop, source: SourceTokenIDs},
		{name: "vLLM token_id:N logprobs", api: OpenAI, req: req,
			body: `{"choices":[{"text":" hi","finish_reason":"length","logprobs":{"tokens":["token_id:9","token_id:4"],"token_logprobs":[-0.1,-0.2]}}],"usage":{"completion_tokens":2}}`,
			ids:  []int{9, 4}, finish: FinishLength, source: SourceLogprobTokens},
		{name: "token_ids without the stop id that matched_stop names", api: OpenAI, req: twoStops,
			body: `{"choices":[{"text":" hi","finish_reason":"stop","matched_stop":7,"token_ids":[9,4]}],"usage":{"completion_tokens":2}}`,
			ids:  []int{9, 4, 7}, finish: FinishStop, source: SourceTokenIDs, added: true},
		{name: "ids that disagree with the server's count", api: OpenAI, req: req,
			body: `{"choices":[{"text":" hi","finish_reason":"stop","token_ids":[9,4,2]}],"usage":{"completion_tokens":4}}`,
			err:  "counted 4 generated tokens but 3 ids came back"},
		{name: "llama-server logprobs.content ids", api: OpenAI, req: req,
			body: `{"choices":[{"text":" hi","index":0,"logprobs":{"content":[{"id":9,"token":" h","logprob":-0.1,"bytes":[32,104],"top_logprobs":[]},{"id":2,"token":"","logprob":-0.3}]},"finish_reason":"stop"}],"model":"x","usage":{"completion_tokens":2,"prompt_tokens":2}}`,
			ids:  []int{9, 2}, finish: FinishStop, source: SourceLogprobIDs},
		{name: "text only", api: OpenAI, req: req,
			body:   `{"choices":[{"text":" hi","finish_reason":"stop"}],"usage":{"completion_tokens":3}}`,
			finish: FinishStop, source: SourceText},
		{name: "ids past a stop id are cut", api: OpenAI, req: twoStops,
			body: `{"choices":[{"text":"x","finish_reason":"length","token_ids":[9,7,4,4]}],"usage":{"completion_tokens":4}}`,
			ids:  []int{9, 7}, finish: FinishStop, source: SourceTokenIDs, cut: 2},
		{name: "stopped without a known stop id", api: OpenAI, req: twoStops,
			body: `{"choices":[{"text":"x","finish_reason":"stop","token_ids":[9,4]}]}`,
			err:  "did not say which one"},
		{name: "two choices", api: OpenAI, req: req, body: `{"choices":[{"text":"a","finish_reason":"stop"},{"text":"b","finish_reason":"stop"}]}`, err: "2 choices"},
		{name: "more tokens than asked", api: OpenAI, req: req,
			body: `{"choices":[{"text":"x","finish_reason":"length","token_ids":[9,9,9,9,9,9,9,9,9]}]}`, err: "at most 8"},
		{name: "llama-server /completion", api: LlamaCpp, req: req,
			body: `{"index":0,"content":" hi","tokens":[9,4,2],"id_slot":0,"stop":true,"model":"stories","tokens_predicted":3,"tokens_evaluated":2,"stop_type":"eos","stopping_word":""}`,
			ids:  []int{9, 4, 2}, finish: FinishStop, source: SourceTokens},
		{name: "llama-server /completion at the limit", api: LlamaCpp, req: req,
			body: `{"content":" hi","tokens":[9,4],"stop_type":"limit","tokens_predicted":2}`,
			ids:  []int{9, 4}, finish: FinishLength, source: SourceTokens},
		{name: "TGI /generate", api: TGI, req: req,
			body: `{"generated_text":" hi","details":{"finish_reason":"eos_token","generated_tokens":3,"seed":null,"prefill":[{"id":1,"text":"<s>","logprob":null},{"id":5,"text":"a","logprob":-1}],"tokens":[{"id":9,"text":" h","logprob":-0.1,"special":false},{"id":4,"text":"i","logprob":-0.2,"special":false},{"id":2,"text":"</s>","logprob":-0.3,"special":true}]}}`,
			ids:  []int{9, 4, 2}, finish: FinishStop, source: SourceDetails},
		{name: "TGI tokenized the prompt differently", api: TGI, req: req,
			body: `{"generated_text":"x","details":{"finish_reason":"length","generated_tokens":1,"prefill":[{"id":1},{"id":6}],"tokens":[{"id":9}]}}`,
			err:  "tokenized the prompt text to [1 6], not to the prompt's ids [1 5]"},
		{name: "an answer of another API", api: LlamaCpp, req: req, body: `{"choices":[]}`, err: "stop_type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeResponse(tc.api, []byte(tc.body), tc.req)
			if err == nil && r.Source != SourceText {
				err = r.finish()
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.IDs, tc.ids) || r.Finish != tc.finish || r.Source != tc.source || r.Cut != tc.cut || r.AddedStop != tc.added {
				t.Fatalf("got ids %v finish %s source %s cut %d added %v", r.IDs, r.Finish, r.Source, r.Cut, r.AddedStop)
			}
		})
	}
}

// TestRetokenize: a text answer gets its ids when the text survives the round
// trip and the count matches the server's; otherwise it is rejected.
func TestRetokenize(t *testing.T) {
	enc := func(s string) ([]int, error) {
		ids := make([]int, len(s))
		for i := range s {
			ids[i] = int(s[i])
		}
		return ids, nil
	}
	dec := func(ids []int) string {
		b := make([]byte, 0, len(ids))
		for _, id := range ids {
			if id != 2 && id != 'Z' { // 'Z' is lost by this tokenizer
				b = append(b, byte(id))
			}
		}
		return string(b)
	}
	mk := func(text string, n int) *Response {
		return &Response{Text: text, Finish: FinishStop, Source: SourceText, CompletionTokens: n, StopID: -1, key: 4, stop: []int{2}, maxTokens: 10}
	}
	r := mk("abc", 4)
	if err := r.Retokenize(enc, dec); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.IDs, []int{'a', 'b', 'c', 2}) || !r.AddedStop {
		t.Fatalf("ids %v", r.IDs)
	}
	for _, tc := range []struct {
		r    *Response
		want string
	}{
		{mk("abZ", 4), `re-tokenizes to ids that decode to "ab"`},
		{mk("abc", 6), "counted 6 generated tokens but 4"},
	} {
		err := tc.r.Retokenize(enc, dec)
		var rej *RejectError
		if !errors.As(err, &rej) || !strings.Contains(err.Error(), tc.want) || tc.r.IDs != nil {
			t.Fatalf("%q: %v (ids %v), want a rejection saying %q", tc.r.Text, err, tc.r.IDs, tc.want)
		}
	}
}

// TestBackoff: the wait doubles up to the cap, stays within [d/2, d), and is
// a pure function of the request key and the attempt.
func TestBackoff(t *testing.T) {
	base, limit := 100*time.Millisecond, 2*time.Second
	differ := false
	for n := 1; n <= 10; n++ {
		d := min(base<<(n-1), limit)
		for key := uint64(0); key < 50; key++ {
			w := backoff(base, limit, key, n)
			if w < d/2 || w >= d {
				t.Fatalf("attempt %d key %d: wait %v outside [%v, %v)", n, key, w, d/2, d)
			}
			if w != backoff(base, limit, key, n) {
				t.Fatal("the wait is not a function of key and attempt")
			}
			if w != backoff(base, limit, key+1, n) {
				differ = true
			}
		}
	}
	if !differ {
		t.Fatal("no jitter between requests")
	}
	if w := backoff(base, limit, 1, 200); w < limit/2 || w >= limit {
		t.Fatalf("attempt 200: %v", w)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"": -1, "3": 3 * time.Second, "0": 0, "1.5": 1500 * time.Millisecond, "soon": -1, "-4": -1,
		"Thu, 02 Jan 2025 03:04:15 GMT": 10 * time.Second,
	} {
		if got := retryAfter(h, now); got != want {
			t.Fatalf("Retry-After %q: %v, want %v", h, got, want)
		}
	}
}

func TestServerMessage(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":{"message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","code":404}}`:       "The model `x` does not exist.",
		`{"object":"error","message":"Prompt cannot be empty","type":"BadRequestError","code":400}`:               "Prompt cannot be empty",
		`{"error":"Input validation error: ` + "`top_p`" + ` must be > 0.0 and < 1.0","error_type":"validation"}`: "Input validation error: `top_p` must be > 0.0 and < 1.0",
		`{"detail":[{"loc":["body","prompt"],"msg":"field required"}]}`:                                           `[{"loc":["body","prompt"],"msg":"field required"}]`,
		`<html>Bad Gateway</html>`: `<html>Bad Gateway</html>`,
	} {
		if got := serverMessage([]byte(body)); got != want {
			t.Fatalf("%s: %q, want %q", body, got, want)
		}
	}
}

// An endpoint that keeps failing rests longer with each failure in a row,
// whatever attempt of its request each failure was (a server that is down
// stops taking the first attempts of every request), and an answer ends its
// run: the next failure rests only the request's own wait again.
func TestEndpointRestGrows(t *testing.T) {
	base, limit := 10*time.Millisecond, time.Second
	now := time.Unix(1000, 0)
	e := &endpoint{base: "http://x"}
	var last time.Duration
	for n := 1; n <= 8; n++ {
		// Every failure is a first attempt: the request's own wait is
		// base/2 at most.
		w := e.failed(now, base/2, base, limit, 7)
		if lo := min(base<<(n-1), limit) / 2; w < lo {
			t.Fatalf("failure %d in a row: rests %v, want at least %v", n, w, lo)
		}
		if got := e.until().Sub(now); got != w {
			t.Fatalf("failure %d: out of the rotation for %v, told %v", n, got, w)
		}
		last = w
	}
	if last < limit/2 {
		t.Fatalf("after 8 failures in a row the rest is %v, want it near the limit %v", last, limit)
	}
	e.answered()
	e.downUntil = time.Time{}
	if w := e.failed(now, base/2, base, limit, 7); w >= base {
		t.Fatalf("the first failure after an answer rests %v, want the request's own wait, below %v", w, base)
	}
	// A longer wait the request asks for (Retry-After) is kept.
	if w := e.failed(now, 3*time.Second, base, limit, 7); w != 3*time.Second {
		t.Fatalf("a 3s Retry-After gave a rest of %v", w)
	}
}
