// Package completionstest runs fake completion servers for tests: they speak
// the wire formats of package completions (vLLM-style /v1/completions,
// llama-server's /completion, TGI's /generate), answer with a generator the
// test supplies, and misbehave on a seeded schedule: dropped connections, 429,
// 500 and slow answers. The schedule depends only on the seed, the request
// body and how many times that body was sent before, never on timing, so a
// test sees the same faults on every run.
package completionstest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/drafter-ai/drafter/pkg/completions"
)

// Answer is what the fake model generated for a request.
type Answer struct {
	// IDs are the generated ids, the stop id included when Finish is
	// "stop"; Text their text (special tokens left out).
	IDs    []int
	Text   string
	Finish string // completions.FinishStop or completions.FinishLength
}

// Faults sets how often each misbehaviour happens: every attempt draws one
// number in [0, 1) from (Seed, body, attempt) and misbehaves when it falls in
// a fault's share (Drop first, then TooMany, ServerError, Slow).
type Faults struct {
	Seed                             uint64
	Drop, TooMany, ServerError, Slow float64
	// SlowDelay is how long a slow answer waits (it still answers unless the
	// client gave up).
	SlowDelay time.Duration
	// RetryAfter is the Retry-After header sent with 429 ("" for none).
	RetryAfter string
	// MaxInARow ends the faults for a body after this many (default 3), so
	// every request eventually succeeds.
	MaxInARow int
}

// Options configure a Server.
type Options struct {
	// API is the wire format served (default completions.OpenAI).
	API completions.API
	// Model is the served model name (default "fake-model"); OwnedBy its
	// owned_by in /v1/models.
	Model, OwnedBy string
	// AnswerModel, when set, is the model name written in the answers
	// instead of Model: a router in front of the engines that answers from
	// another model than the one requested.
	AnswerModel string
	// Source selects, for API OpenAI, where the ids go: token_ids (the
	// default), logprobs.tokens, logprobs.content.id, or text only.
	Source completions.Source
	// Generate answers a request (Request.Key is not set).
	Generate func(r completions.Request) Answer
	// Tokenize turns TGI's text prompt into ids (API TGI only).
	Tokenize func(text string) []int
	// MaxContext, when set, refuses a prompt plus max tokens beyond it with
	// vLLM's 400 message.
	MaxContext int
	// APIKey, when set, is required as a Bearer token.
	APIKey string
	Faults Faults
}

// Stats count what the server did.
type Stats struct {
	Requests, Answered, Dropped, TooMany, ServerErrors, Slow int
	// PerBody counts the answers sent per distinct request body.
	PerBody map[string]int
}

// Server is a running fake server.
type Server struct {
	*httptest.Server
	opt Options

	mu       sync.Mutex
	attempts map[[32]byte]int
	stats    Stats
	down     bool
}

// New starts a server; Close it when done.
func New(opt Options) *Server {
	if opt.API == "" {
		opt.API = completions.OpenAI
	}
	if opt.Model == "" {
		opt.Model = "fake-model"
	}
	if opt.Source == "" {
		opt.Source = completions.SourceTokenIDs
	}
	if opt.Faults.MaxInARow == 0 {
		opt.Faults.MaxInARow = 3
	}
	s := &Server{opt: opt, attempts: map[[32]byte]int{}, stats: Stats{PerBody: map[string]int{}}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// SetDown takes the server down (true) or back up (false). While down it
// closes every connection without an answer, as a server that is restarting
// does, and counts nothing: the client sees what it sees of a dead replica.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.PerBody = map[string]int{}
	for k, v := range s.stats.PerBody {
		st.PerBody[k] = v
	}
	return st
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		hangUp(w)
		return
	}
	if s.opt.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.opt.APIKey {
		writeError(w, http.StatusUnauthorized, "Unauthorized: invalid API key")
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []map[string]any{{"id": s.opt.Model, "object": "model", "owned_by": s.opt.OwnedBy}}})
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	h := sha256.Sum256(body)
	s.mu.Lock()
	s.stats.Requests++
	k := s.attempts[h]
	s.attempts[h] = k + 1
	s.mu.Unlock()
	if s.fault(w, r, h, k) {
		return
	}
	req, status, msg := s.parse(r.URL.Path, body)
	if status != 0 {
		writeError(w, status, msg)
		return
	}
	a := s.opt.Generate(req)
	var out any
	switch s.opt.API {
	case completions.OpenAI:
		out = s.openAIAnswer(a)
	case completions.LlamaCpp:
		stop := map[string]string{completions.FinishStop: "eos", completions.FinishLength: "limit"}[a.Finish]
		out = map[string]any{"content": a.Text, "tokens": a.IDs, "stop_type": stop, "stop": true, "model": s.answerModel(), "tokens_predicted": len(a.IDs)}
	case completions.TGI:
		prefill := []map[string]any{}
		for _, id := range req.Prompt {
			prefill = append(prefill, map[string]any{"id": id, "text": "", "logprob": nil})
		}
		toks := []map[string]any{}
		for _, id := range a.IDs {
			toks = append(toks, map[string]any{"id": id, "text": "", "logprob": -0.5, "special": false})
		}
		fin := map[string]string{completions.FinishStop: "eos_token", completions.FinishLength: "length"}[a.Finish]
		out = map[string]any{"generated_text": a.Text, "details": map[string]any{"finish_reason": fin, "generated_tokens": len(a.IDs),
			"seed": req.Seed, "prefill": prefill, "tokens": toks}}
	}
	b, _ := json.Marshal(out)
	s.mu.Lock()
	s.stats.Answered++
	s.stats.PerBody[string(h[:])]++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func (s *Server) openAIAnswer(a Answer) map[string]any {
	ch := map[string]any{"index": 0, "text": a.Text, "finish_reason": a.Finish, "stop_reason": nil}
	switch s.opt.Source {
	case completions.SourceTokenIDs:
		ch["token_ids"] = a.IDs
	case completions.SourceLogprobTokens:
		toks := make([]string, len(a.IDs))
		for i, id := range a.IDs {
			toks[i] = fmt.Sprintf("token_id:%d", id)
		}
		ch["logprobs"] = map[string]any{"tokens": toks, "token_logprobs": make([]float64, len(a.IDs))}
	case completions.SourceLogprobIDs:
		content := make([]map[string]any, len(a.IDs))
		for i, id := range a.IDs {
			content[i] = map[string]any{"id": id, "token": "", "logprob": -0.5}
		}
		ch["logprobs"] = map[string]any{"content": content}
	}
	return map[string]any{"id": "cmpl-fake", "object": "text_completion", "model": s.answerModel(), "choices": []any{ch},
		"usage": map[string]any{"completion_tokens": len(a.IDs)}}
}

// answerModel is the model name the answers carry.
func (s *Server) answerModel() string {
	if s.opt.AnswerModel != "" {
		return s.opt.AnswerModel
	}
	return s.opt.Model
}

// fault misbehaves for attempt k of the body with hash h, and reports whether
// it did (the request is then finished).
func (s *Server) fault(w http.ResponseWriter, r *http.Request, h [32]byte, k int) bool {
	f := s.opt.Faults
	if k >= f.MaxInARow {
		return false
	}
	u := draw(f.Seed, h, k)
	count := func(p *int) {
		s.mu.Lock()
		*p++
		s.mu.Unlock()
	}
	switch {
	case u < f.Drop:
		count(&s.stats.Dropped)
		hangUp(w)
		return true
	case u < f.Drop+f.TooMany:
		count(&s.stats.TooMany)
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		writeError(w, http.StatusTooManyRequests, "Too many requests: the queue is full")
		return true
	case u < f.Drop+f.TooMany+f.ServerError:
		count(&s.stats.ServerErrors)
		writeError(w, http.StatusInternalServerError, "Internal server error: CUDA out of memory (fake)")
		return true
	case u < f.Drop+f.TooMany+f.ServerError+f.Slow:
		count(&s.stats.Slow)
		select {
		case <-time.After(f.SlowDelay):
		case <-r.Context().Done():
			return true
		}
	}
	return false
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // the server closes the connection
}

// draw is a number in [0, 1) that depends only on seed, the body and k.
func draw(seed uint64, h [32]byte, k int) float64 {
	var b [48]byte
	copy(b[:], h[:])
	binary.LittleEndian.PutUint64(b[32:], seed)
	binary.LittleEndian.PutUint64(b[40:], uint64(k))
	d := sha256.Sum256(b[:])
	return float64(binary.LittleEndian.Uint64(d[:])>>11) * 0x1p-53
}

// parse reads a request body of the server's API; a non-zero status refuses
// it with msg.
func (s *Server) parse(path string, body []byte) (completions.Request, int, string) {
	var r completions.Request
	bad := func(format string, args ...any) (completions.Request, int, string) {
		return r, http.StatusBadRequest, fmt.Sprintf(format, args...)
	}
	want := map[completions.API]string{completions.OpenAI: "/v1/completions", completions.LlamaCpp: "/completion", completions.TGI: "/generate"}[s.opt.API]
	if path != want {
		return r, http.StatusNotFound, fmt.Sprintf("Not Found: %s", path)
	}
	switch s.opt.API {
	case completions.OpenAI:
		var b struct {
			Model     string   `json:"model"`
			Prompt    []int    `json:"prompt"`
			MaxTokens int      `json:"max_tokens"`
			T         *float64 `json:"temperature"`
			P         *float64 `json:"top_p"`
			K         *int     `json:"top_k"`
			M         *float64 `json:"min_p"`
			Seed      int64    `json:"seed"`
			Stop      []int    `json:"stop_token_ids"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			return bad("invalid request body: %v", err)
		}
		if b.Model != s.opt.Model {
			return r, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", b.Model)
		}
		if b.T == nil || b.P == nil || b.K == nil || b.M == nil {
			return bad("temperature, top_p, top_k and min_p must all be set")
		}
		r = completions.Request{Prompt: b.Prompt, MaxTokens: b.MaxTokens, Seed: b.Seed, Stop: b.Stop,
			Sampling: completions.Sampling{Temperature: *b.T, TopP: *b.P, TopK: max(*b.K, 0), MinP: *b.M}}
	case completions.LlamaCpp:
		var b struct {
			Prompt   []int    `json:"prompt"`
			NPredict int      `json:"n_predict"`
			T        float64  `json:"temperature"`
			K        int      `json:"top_k"`
			P        float64  `json:"top_p"`
			M        float64  `json:"min_p"`
			Seed     int64    `json:"seed"`
			Samplers []string `json:"samplers"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			return bad("invalid request body: %v", err)
		}
		r = completions.Request{Prompt: b.Prompt, MaxTokens: b.NPredict, Seed: b.Seed,
			Sampling: completions.Sampling{Temperature: b.T, TopP: b.P, TopK: b.K, MinP: b.M}}
	case completions.TGI:
		var b struct {
			Inputs     string `json:"inputs"`
			Parameters struct {
				MaxNewTokens int      `json:"max_new_tokens"`
				DoSample     bool     `json:"do_sample"`
				T            *float64 `json:"temperature"`
				K            *int     `json:"top_k"`
				P            *float64 `json:"top_p"`
				Seed         *int64   `json:"seed"`
			} `json:"parameters"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			return bad("Failed to deserialize the JSON body: %v", err)
		}
		p := b.Parameters
		r = completions.Request{Prompt: s.opt.Tokenize(b.Inputs), PromptText: b.Inputs, MaxTokens: p.MaxNewTokens}
		if p.T != nil {
			r.Sampling.Temperature = *p.T
		}
		if p.K != nil {
			r.Sampling.TopK = *p.K
		}
		if p.P != nil {
			r.Sampling.TopP = *p.P
		}
		if p.Seed != nil {
			r.Seed = *p.Seed
		}
	}
	if n := len(r.Prompt) + r.MaxTokens; s.opt.MaxContext > 0 && n > s.opt.MaxContext {
		return bad("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			s.opt.MaxContext, n, len(r.Prompt), r.MaxTokens)
	}
	return r, 0, ""
}

// writeError answers with vLLM's (OpenAI's) error layout.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	typ := strings.ReplaceAll(http.StatusText(status), " ", "")
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": status}})
}
