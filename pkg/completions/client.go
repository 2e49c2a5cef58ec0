package completions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// API selects the endpoint and its wire format.
type API string

// The supported APIs.
const (
	// OpenAI is POST {base}/v1/completions (vLLM, SGLang, llama-server).
	OpenAI API = "openai"
	// LlamaCpp is llama-server's native POST {base}/completion.
	LlamaCpp API = "llamacpp"
	// TGI is text-generation-inference's native POST {base}/generate.
	TGI API = "tgi"
)

// ParseAPI checks a user's choice of API.
func ParseAPI(s string) (API, error) {
	switch a := API(s); a {
	case OpenAI, LlamaCpp, TGI:
		return a, nil
	}
	return "", fmt.Errorf("completions: API %q: want %s, %s or %s", s, OpenAI, LlamaCpp, TGI)
}

// Source says where the token ids of a response came from.
type Source string

// The token-id sources, in the order the OpenAI API prefers them.
const (
	// SourceTokenIDs is choices[].token_ids (vLLM and SGLang return_token_ids).
	SourceTokenIDs Source = "token_ids"
	// SourceLogprobTokens is logprobs.tokens as "token_id:N" (vLLM
	// return_tokens_as_token_ids).
	SourceLogprobTokens Source = "logprobs.tokens"
	// SourceLogprobIDs is logprobs.content[].id (llama-server).
	SourceLogprobIDs Source = "logprobs.content.id"
	// SourceTokens is "tokens" of llama-server's native /completion.
	SourceTokens Source = "tokens"
	// SourceDetails is details.tokens[].id of TGI's /generate.
	SourceDetails Source = "details.tokens"
	// SourceText means the answer held text only: Response.Retokenize must
	// turn it into ids.
	SourceText Source = "text"
)

// Finish reasons of a Response.
const (
	FinishStop   = "stop"   // the generation ended at a stop id, which ends Response.IDs
	FinishLength = "length" // the token budget (or the server's context) ran out
)

// MaxSeed is the largest Request.Seed: llama-server keeps seeds in 32 bits and
// treats 0xFFFFFFFF as "random", TGI wants a positive seed, so seeds are kept
// in 1..2^31-1, which every engine reads the same way.
const MaxSeed = 1<<31 - 1

// Sampling are the decoding settings sent with every request.
type Sampling struct {
	// Temperature 0 is greedy decoding.
	Temperature float64
	// TopP 0 or 1 disables top-p; TopK 0 disables top-k; MinP 0 disables
	// min-p.
	TopP float64
	TopK int
	MinP float64
}

// Request is one generation.
type Request struct {
	// Key identifies the request among the run's (the sample index): it
	// keys the retry jitter and names the request in errors.
	Key uint64
	// Prompt are the input ids, at least one.
	Prompt []int
	// PromptText is the text that the server's tokenizer turns into Prompt
	// (adding its special tokens): API TGI sends it instead of Prompt and
	// checks the ids TGI reports. Unused by the other APIs.
	PromptText string
	// MaxTokens is the most tokens to generate, at least one.
	MaxTokens int
	// Sampling are the decoding settings; Seed (1..MaxSeed) seeds them.
	Sampling Sampling
	Seed     int64
	// Stop are ids that end the generation (sent as stop_token_ids; the
	// response is cut after the first one).
	Stop []int
}

// Response is a finished generation.
type Response struct {
	// IDs are the generated ids, ending with the stop id when Finish is
	// FinishStop; nil when Source is SourceText until Retokenize fills them.
	IDs []int
	// Text is the generated text as the server wrote it.
	Text string
	// Finish is FinishStop or FinishLength.
	Finish string
	// Source says where IDs came from.
	Source Source
	// CompletionTokens is the number of generated tokens the server counted
	// (usage or details), -1 when it did not say.
	CompletionTokens int
	// StopID is the stop id the server said it matched, -1 when it did not.
	StopID int
	// Cut is the number of ids dropped after the first stop id; AddedStop
	// tells that the stop id was appended (see the package doc).
	Cut       int
	AddedStop bool
	// URL is the base URL that answered, Model the model name it reported,
	// Attempts the number of attempts it took.
	URL      string
	Model    string
	Attempts int

	key       uint64
	stop      []int
	maxTokens int
}

// Options configure a Client.
type Options struct {
	// URLs are the servers' base URLs (http://host:port, with or without a
	// trailing /v1); requests are spread over them.
	URLs []string
	// API selects the endpoint (default OpenAI).
	API API
	// Model is the model name sent with each request; "" takes the one the
	// servers list at GET /v1/models (Connect).
	Model string
	// APIKey, when set, is sent as "Authorization: Bearer APIKey".
	APIKey string
	// Concurrency is the number of requests in flight (default 8).
	Concurrency int
	// Window bounds how far Run's requests may run ahead of the first one
	// not yet handed to the caller (default 4*Concurrency).
	Window int
	// Timeout bounds each attempt (default 10 minutes).
	Timeout time.Duration
	// MaxAttempts bounds the attempts per request (default 8).
	MaxAttempts int
	// Backoff is the wait after the first failed attempt, doubled after each
	// further one up to MaxBackoff (defaults 500ms and 30s); each wait is
	// scaled by a factor in [0.5, 1) derived from the request key and the
	// attempt.
	Backoff, MaxBackoff time.Duration
	// HTTP is the HTTP client (default: a client without overall timeout).
	HTTP *http.Client
	// OnRetry, when set, is told of every failed attempt that will be
	// retried, before the wait, so that a slow or unreachable server is
	// never waited on in silence. It may be called from several goroutines
	// at once.
	OnRetry func(Retry)
	// Notify, when set, is told in one line of every change in the set of
	// servers taking requests (a server left out at Connect because it does
	// not answer, taken in later, or answering but unfit for the run), so
	// that a run going on with fewer servers than it was given says so. It
	// may be called from several goroutines at once.
	Notify func(msg string)
	// StartGrace bounds how long Connect waits for the other servers once
	// one has answered (default DefaultStartGrace): a server that has not
	// answered by then is left out and probed in the background.
	StartGrace time.Duration
	// AllowServedModel accepts answers that name this model instead of the
	// one requested (the OpenAI API's "model" field), for a router or
	// gateway that reports another name for the same checkpoint. Without
	// it such an answer is a *ModelError: an answer from another model is
	// the silent failure a run must not have.
	AllowServedModel string
}

// DefaultStartGrace is the default Options.StartGrace: long enough for a
// loaded server to list its models and answer a one-token probe, short
// enough that a hung replica does not hold up the others.
const DefaultStartGrace = 10 * time.Second

// Retry describes a failed attempt that will be retried.
type Retry struct {
	// URL is the server the attempt went to; Key the request's key (0 for
	// the model listing).
	URL string
	Key uint64
	// Attempt is the failed attempt (1-based) of at most MaxAttempts.
	Attempt, MaxAttempts int
	// Err is why it failed; Wait how long the request waits before its next
	// attempt (0 when another server takes it at once).
	Err  error
	Wait time.Duration
	// Asked is the wait the server asked for (Retry-After) when it was
	// longer than MaxRetryAfter and Wait was cut to that; 0 otherwise.
	Asked time.Duration
}

// Client sends requests to completion servers. It is safe for concurrent use.
// A client that Connect found some servers down for probes them in the
// background until Close.
type Client struct {
	opt   Options
	model string
	eps   []*endpoint
	next  atomic.Uint64

	// What Connect settled, for the background probes of servers that
	// were down: the probe request and the token-id source of the run.
	probe  Request
	source Source
	stop   context.CancelFunc
	probes sync.WaitGroup
}

// endpoint is one server and its health.
type endpoint struct {
	base string // without trailing "/" or "/v1"
	// out keeps the server out of the rotation: it did not answer at
	// Connect, and no background probe has found it fit since.
	out atomic.Bool

	mu        sync.Mutex
	downUntil time.Time
	fails     int // failed attempts in a row, reset by an answer
}

// New checks opt and returns a client.
func New(opt Options) (*Client, error) {
	if len(opt.URLs) == 0 {
		return nil, errors.New("completions: no server URL")
	}
	if opt.API == "" {
		opt.API = OpenAI
	}
	if _, err := ParseAPI(string(opt.API)); err != nil {
		return nil, err
	}
	if opt.Concurrency <= 0 {
		opt.Concurrency = 8
	}
	if opt.Window <= 0 {
		opt.Window = 4 * opt.Concurrency
	}
	opt.Window = max(opt.Window, opt.Concurrency)
	if opt.Timeout <= 0 {
		opt.Timeout = 10 * time.Minute
	}
	if opt.MaxAttempts <= 0 {
		opt.MaxAttempts = 8
	}
	if opt.Backoff <= 0 {
		opt.Backoff = 500 * time.Millisecond
	}
	if opt.MaxBackoff <= 0 {
		opt.MaxBackoff = 30 * time.Second
	}
	if opt.StartGrace <= 0 {
		opt.StartGrace = DefaultStartGrace
	}
	opt.MaxBackoff = max(opt.MaxBackoff, opt.Backoff)
	if opt.HTTP == nil {
		opt.HTTP = &http.Client{}
	}
	c := &Client{opt: opt, model: opt.Model}
	seen := map[string]bool{}
	for _, u := range opt.URLs {
		base, err := BaseURL(u)
		if err != nil {
			return nil, err
		}
		if seen[base] {
			return nil, fmt.Errorf("completions: URL %s is given twice", u)
		}
		seen[base] = true
		c.eps = append(c.eps, &endpoint{base: base})
	}
	return c, nil
}

// BaseURL returns the base URL the client uses for the server URL u: u
// without a trailing "/" or "/v1". It must be an http or https URL with a
// host and without a query or fragment, and carry no user name or password:
// the URLs are recorded with the run (send a key as Options.APIKey).
func BaseURL(u string) (string, error) {
	b := strings.TrimSuffix(strings.TrimRight(strings.TrimSpace(u), "/"), "/v1")
	p, err := url.Parse(b)
	switch {
	case err == nil && p.User != nil:
		return "", fmt.Errorf("completions: server URL %q carries credentials, which would be recorded with the URL; send an API key instead", u)
	case err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || p.RawQuery != "" || p.Fragment != "":
		return "", fmt.Errorf("completions: server URL %q: want http://host:port or https://host/prefix", u)
	}
	return b, nil
}

// Options returns the client's options with defaults filled in.
func (c *Client) Options() Options { return c.opt }

// Model returns the model name sent with requests ("" before Connect when
// Options.Model was empty).
func (c *Client) Model() string { return c.model }

// Server describes one server, as Connect found it.
type Server struct {
	// URL is the base URL; Models the ids GET /v1/models listed and OwnedBy
	// the first one's owned_by ("vllm", "sglang", "llamacpp", ...).
	URL     string   `json:"url"`
	Models  []string `json:"models"`
	OwnedBy string   `json:"owned_by,omitempty"`
	// Source is where the probe's token ids came from.
	Source Source `json:"token_id_source"`
	// ServedModel is the model name the server's answer to the probe
	// carried, when it was Options.AllowServedModel rather than the model
	// requested.
	ServedModel string `json:"served_model,omitempty"`
	// Down tells that the server did not answer at Connect: the run started
	// without it (Models and Source are then unknown).
	Down bool `json:"down_at_start,omitempty"`
}

// Info is what Connect learned about the servers.
type Info struct {
	// Model is the model name used; Source where the token ids come from
	// (the same for every server).
	Model  string   `json:"model"`
	Source Source   `json:"token_id_source"`
	API    API      `json:"api"`
	URLs   []string `json:"urls"`
	// ServedModel is Options.AllowServedModel: the other model name whose
	// answers the run accepts.
	ServedModel string `json:"served_model,omitempty"`
	// Servers are the per-server details.
	Servers []Server `json:"servers"`
	// Warnings name settings a server will not apply the way drafter does.
	Warnings []string `json:"-"`
}

// Connect lists the models of every server (GET /v1/models), settles the
// model name (Options.Model, or the only one the servers serve), and sends
// probe to every server (with MaxTokens 1) to learn where its token ids come
// from. Servers that serve different models or return ids differently are an
// error: one run must describe its generator in one line.
//
// A server that does not answer (no connection, timeouts, 5xx) does not hold
// up the others: once one server has answered, the rest are waited for until
// each has failed once, StartGrace at most. Those that still fail are left
// out of the rotation (Server.Down, one Notify line each) and probed in the
// background, with a jittered backoff bounded by MaxBackoff, until they pass
// the same checks and are taken in, or until Close or the end of ctx. Only
// when no server answers does each get its whole retry budget, and the error
// names every one. Call Connect once, before Run.
func (c *Client) Connect(ctx context.Context, probe Request) (*Info, error) {
	probe.MaxTokens = 1
	if err := c.check(&probe); err != nil {
		return nil, err
	}
	info := &Info{API: c.opt.API, ServedModel: c.opt.AllowServedModel, Servers: make([]Server, len(c.eps))}
	all := make([]int, len(c.eps))
	for i, ep := range c.eps {
		all[i] = i
		info.URLs = append(info.URLs, ep.base)
		info.Servers[i].URL = ep.base
	}
	down := map[int]error{}
	// 1. The models each server lists.
	res, err := c.reach(ctx, all, func(ctx context.Context, i int) error {
		s, err := c.models(ctx, c.eps[i])
		if err == nil {
			info.Servers[i] = s
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	up, err := sortOut(c.eps, all, res, down, "listing models at")
	if err != nil {
		return nil, err
	}
	model := c.opt.Model
	for _, i := range up {
		s := info.Servers[i]
		switch {
		case model == "" && len(s.Models) == 1:
			model = s.Models[0]
		case model == "" && len(s.Models) > 1:
			return nil, fmt.Errorf("completions: %s serves %d models (%s); choose one", s.URL, len(s.Models), strings.Join(s.Models, ", "))
		case model != "" && len(s.Models) > 0 && !slices.Contains(s.Models, model):
			return nil, fmt.Errorf("completions: %s does not serve model %q; it serves %s", s.URL, model, strings.Join(s.Models, ", "))
		}
	}
	if model == "" {
		return nil, fmt.Errorf("completions: %s lists no model at /v1/models; name the model", info.Servers[up[0]].URL)
	}
	c.model, info.Model = model, model

	// 2. One probe per server that answered: where its ids come from.
	answers := make([]*Response, len(c.eps))
	res, err = c.reach(ctx, up, func(ctx context.Context, i int) error {
		r, err := c.probeOnce(ctx, c.eps[i], &probe)
		answers[i] = r
		return err
	})
	if err != nil {
		return nil, err
	}
	if up, err = sortOut(c.eps, up, res, down, "probe request to"); err != nil {
		return nil, err
	}
	for k, i := range up {
		r, s := answers[i], &info.Servers[i]
		s.Source = r.Source
		if r.Model != c.model {
			s.ServedModel = r.Model
		}
		if k > 0 && r.Source != info.Source {
			return nil, fmt.Errorf("completions: %s returns token ids as %s but %s as %s; give servers of one kind", s.URL, r.Source, info.Servers[up[0]].URL, info.Source)
		}
		info.Source = r.Source
		if w := c.warning(*s); w != "" {
			info.Warnings = append(info.Warnings, w)
		}
	}
	c.probe, c.source = probe, info.Source

	// 3. The servers left out, probed in the background.
	bg, stop := context.WithCancel(ctx)
	c.stop = stop
	for i, ep := range c.eps {
		err, ok := down[i]
		if !ok {
			continue
		}
		ep.out.Store(true)
		info.Servers[i] = Server{URL: ep.base, Down: true}
		c.notify("%s does not answer (%v); starting with the %d other server(s), and taking it in once it answers", ep.base, err, len(up))
		c.probes.Add(1)
		go c.watch(bg, i)
	}
	return info, nil
}

// Close stops the background probes of servers that were down at Connect
// and waits for them to end. The client can still send requests.
func (c *Client) Close() {
	if c.stop != nil {
		c.stop()
	}
	c.probes.Wait()
}

// notify sends one line to Options.Notify.
func (c *Client) notify(format string, args ...any) {
	if c.opt.Notify != nil {
		c.opt.Notify(fmt.Sprintf(format, args...))
	}
}

// warning is what the run should know of server s, "" when nothing.
func (c *Client) warning(s Server) string {
	if c.opt.API == OpenAI && s.OwnedBy == "llamacpp" {
		return fmt.Sprintf("%s is llama.cpp's server: its /v1/completions applies the temperature after top-k, top-p and min-p; use the llamacpp API for Hugging Face's order", s.URL)
	}
	return ""
}

// sortOut splits the endpoints idx by their outcomes res (reach): the ones
// that answered are returned, the ones that did not answer (a failure that
// may go away) are added to down; any other failure (a 4xx, an answer that is
// not the API's) is the error, as is every server down.
func sortOut(eps []*endpoint, idx []int, res []error, down map[int]error, what string) ([]int, error) {
	var up []int
	for k, i := range idx {
		err := res[k]
		if err == nil {
			up = append(up, i)
			continue
		}
		if !notAnswering(err) {
			return nil, fmt.Errorf("completions: %s %s: %w", what, eps[i].base, err)
		}
		down[i] = err
	}
	if len(up) > 0 {
		return up, nil
	}
	var b strings.Builder
	for k, i := range idx {
		sep := "; "
		if k == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s: %v", sep, eps[i].base, down[i])
	}
	return nil, fmt.Errorf("completions: no server answers%s", b.String())
}

// notAnswering reports whether err says that a server does not answer (yet),
// rather than that it answered wrongly.
func notAnswering(err error) bool {
	var na errNoAnswerYet
	ok, _ := retryable(err)
	return ok || errors.As(err, &na)
}

// errNoAnswerYet is the outcome of a server that had neither answered nor
// failed when Connect stopped waiting for it.
type errNoAnswerYet struct{ grace time.Duration }

func (e errNoAnswerYet) Error() string {
	return fmt.Sprintf("no answer within %v of another server's", e.grace)
}

// reach runs step on the endpoints idx at once, each retried as a request is
// (the same backoff and MaxAttempts), and returns each one's outcome in idx
// order: nil when it answered, else its last error. Once one endpoint has
// answered, the others are waited for until each has failed once (a
// temporary failure), StartGrace at most, and the ones still failing keep
// that failure (errNoAnswerYet when they had none): a server that is down
// costs the run one attempt, not its retry budget. When none answers, every
// endpoint runs its whole budget.
func (c *Client) reach(ctx context.Context, idx []int, step func(ctx context.Context, i int) error) ([]error, error) {
	ctx, cancel := context.WithCancel(ctx)
	type event struct {
		k     int
		err   error
		final bool
	}
	events := make(chan event, 2*len(idx)) // at most a first failure and an outcome each
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for k, i := range idx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.retry(ctx, 0, false, func(ctx context.Context, attempt int) (*endpoint, error) {
				err := step(ctx, i)
				if ok, _ := retryable(err); ok && attempt == 1 {
					events <- event{k: k, err: err}
				}
				return c.eps[i], err
			})
			events <- event{k: k, err: err, final: true}
		}()
	}
	res := make([]error, len(idx))
	const running, failed, finished = 0, 1, 2
	state := make([]int, len(idx))
	answered := 0
	var grace <-chan time.Time
wait:
	for {
		done, settled := 0, 0
		for _, s := range state {
			if s == finished {
				done++
			}
			if s != running {
				settled++
			}
		}
		if done == len(idx) || (answered > 0 && settled == len(idx)) {
			break
		}
		select {
		case e := <-events:
			switch {
			case e.final:
				state[e.k], res[e.k] = finished, e.err
				if e.err == nil {
					answered++
					if grace == nil {
						grace = time.After(c.opt.StartGrace)
					}
				}
			case state[e.k] == running:
				state[e.k], res[e.k] = failed, e.err
			}
		case <-grace:
			break wait
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for k, s := range state {
		if s == running {
			res[k] = errNoAnswerYet{c.opt.StartGrace}
		}
	}
	return res, nil
}

// models reads GET {base}/v1/models once.
func (c *Client) models(ctx context.Context, ep *endpoint) (Server, error) {
	s := Server{URL: ep.base}
	var doc struct {
		Data []struct {
			ID      string `json:"id"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	if err := c.call(ctx, http.MethodGet, ep.base+"/v1/models", nil, &doc); err != nil {
		return s, err
	}
	for _, d := range doc.Data {
		s.Models = append(s.Models, d.ID)
	}
	if len(doc.Data) > 0 {
		s.OwnedBy = doc.Data[0].OwnedBy
	}
	return s, nil
}

// probeOnce sends the probe to ep once. An answer the probe's sample cannot
// use (a prompt TGI tokenizes its own way) still tells the source: TGI's ids
// always come from its details.
func (c *Client) probeOnce(ctx context.Context, ep *endpoint, probe *Request) (*Response, error) {
	r, err := c.attempt(ctx, ep, probe)
	var rej *RejectError
	if errors.As(err, &rej) && c.opt.API == TGI {
		return &Response{URL: ep.base, Source: SourceDetails, Model: c.model}, nil
	}
	return r, err
}

// watch probes endpoint i, left out at Connect, until it passes Connect's
// checks (it then takes requests) or ctx ends. The waits between probes are
// the backoff of a request keyed by the endpoint: jittered, growing to
// MaxBackoff and no further. A server that answers but cannot take part
// (another model, another token-id source) is said once per reason and
// probed again: it may be fixed while the run goes on.
func (c *Client) watch(ctx context.Context, i int) {
	defer c.probes.Done()
	ep := c.eps[i]
	said := ""
	for n := 1; ; n++ {
		if sleep(ctx, backoff(c.opt.Backoff, c.opt.MaxBackoff, probeKey+uint64(i), n)) != nil {
			return
		}
		s, err := c.fit(ctx, ep)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			ep.answered()
			ep.out.Store(false)
			msg := fmt.Sprintf("%s answers now (after %d probes); it takes requests from here on", ep.base, n)
			if w := c.warning(s); w != "" {
				msg += "; " + w
			}
			c.notify("%s", msg)
			return
		}
		if ok, _ := retryable(err); !ok && err.Error() != said {
			said = err.Error()
			c.notify("%s answers but cannot take part in this run: %v; it stays out (asking again later)", ep.base, err)
		}
	}
}

// probeKey keys the jitter of the background probes, apart from the
// requests' keys (sample indices).
const probeKey = 1 << 62

// fit checks once that ep serves the run's model and returns ids from the
// run's source, as Connect checked the servers that answered it.
func (c *Client) fit(ctx context.Context, ep *endpoint) (Server, error) {
	s, err := c.models(ctx, ep)
	if err != nil {
		return s, err
	}
	if len(s.Models) > 0 && !slices.Contains(s.Models, c.model) {
		return s, fmt.Errorf("it serves %s, not model %q", strings.Join(s.Models, ", "), c.model)
	}
	r, err := c.probeOnce(ctx, ep, &c.probe)
	if err != nil {
		return s, err
	}
	if r.Source != c.source {
		return s, fmt.Errorf("it returns token ids as %s, but this run takes them from %s", r.Source, c.source)
	}
	return s, nil
}

// Do sends one request, retrying and failing over as the package doc says.
func (c *Client) Do(ctx context.Context, r Request) (*Response, error) {
	if err := c.check(&r); err != nil {
		return nil, err
	}
	var out *Response
	err := c.retry(ctx, r.Key, true, func(ctx context.Context, attempt int) (*endpoint, error) {
		ep := c.pick()
		res, err := c.attempt(ctx, ep, &r)
		if err == nil {
			res.Attempts = attempt
			out = res
		}
		return ep, err
	})
	if err != nil {
		return nil, &RequestError{Key: r.Key, Err: err}
	}
	return out, nil
}

// check validates a request before anything is sent.
func (c *Client) check(r *Request) error {
	s := r.Sampling
	switch {
	case len(r.Prompt) == 0:
		return fmt.Errorf("completions: request %d: empty prompt", r.Key)
	case r.MaxTokens < 1:
		return fmt.Errorf("completions: request %d: max tokens %d: want at least 1", r.Key, r.MaxTokens)
	case r.Seed < 1 || r.Seed > MaxSeed:
		return fmt.Errorf("completions: request %d: seed %d outside 1..%d", r.Key, r.Seed, MaxSeed)
	case math.IsNaN(s.Temperature) || s.Temperature < 0 || math.IsNaN(s.TopP) || s.TopP < 0 || s.TopP > 1 || s.TopK < 0 || math.IsNaN(s.MinP) || s.MinP < 0 || s.MinP > 1:
		return fmt.Errorf("completions: request %d: sampling %+v out of range", r.Key, s)
	case c.opt.API == TGI && r.PromptText == "":
		return fmt.Errorf("completions: request %d: the tgi API sends text, and the request has no PromptText", r.Key)
	case c.opt.API == TGI && s.MinP > 0 && s.Temperature > 0:
		return fmt.Errorf("completions: text-generation-inference has no min-p; min-p %g cannot be applied", s.MinP)
	}
	return nil
}

// attempt sends r once to ep and decodes the answer.
func (c *Client) attempt(ctx context.Context, ep *endpoint, r *Request) (*Response, error) {
	path, body, err := requestBody(c.opt.API, c.model, r)
	if err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if err := c.call(ctx, http.MethodPost, ep.base+path, body, &raw); err != nil {
		return nil, err
	}
	res, err := decodeResponse(c.opt.API, raw, r)
	var rej *RejectError
	var te *transportError
	switch {
	case errors.As(err, &te):
		te.url = ep.base + path
		return nil, te
	case errors.As(err, &rej):
		return nil, err
	case err != nil:
		return nil, &protocolError{url: ep.base + path, err: err}
	}
	res.URL = ep.base
	// Only the OpenAI API names the model in the request; llama-server's
	// /completion and TGI's /generate serve the one model they loaded, and
	// llama-server's native answer reports a default name.
	if c.opt.API == OpenAI && res.Model != "" && res.Model != c.model && res.Model != c.opt.AllowServedModel {
		return nil, &ModelError{URL: ep.base, Requested: c.model, Served: res.Model}
	}
	if res.Source != SourceText {
		if err := res.finish(); err != nil {
			return nil, &protocolError{url: ep.base + path, err: err}
		}
	}
	return res, nil
}

// maxBody bounds the size of an answer read into memory.
const maxBody = 256 << 20

// call sends one HTTP request bounded by the attempt timeout and decodes a
// 2xx JSON answer into out; other statuses become *StatusError.
func (c *Client) call(ctx context.Context, method, url string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.opt.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opt.APIKey)
	}
	resp, err := c.opt.HTTP.Do(req)
	if err != nil {
		return &transportError{url: url, timeout: ctx.Err() == context.DeadlineExceeded, limit: c.opt.Timeout, err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return &transportError{url: url, timeout: ctx.Err() == context.DeadlineExceeded, limit: c.opt.Timeout, err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &StatusError{URL: url, Status: resp.StatusCode, Message: serverMessage(data), RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	}
	if len(data) > maxBody {
		return &protocolError{url: url, err: fmt.Errorf("answer larger than %d MiB", maxBody>>20)}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &protocolError{url: url, err: fmt.Errorf("answer is not the expected JSON (%v): %s", err, clip(data))}
	}
	return nil
}

// pick returns the next healthy endpoint in round-robin order, or, when all
// are resting after failures, the one that recovers first. Endpoints left out
// since Connect are not picked.
func (c *Client) pick() *endpoint {
	start := int(c.next.Add(1) - 1)
	now := time.Now()
	var best *endpoint
	var bestAt time.Time
	for k := range c.eps {
		ep := c.eps[(start+k)%len(c.eps)]
		if ep.out.Load() {
			continue
		}
		at := ep.until()
		if !at.After(now) {
			return ep
		}
		if best == nil || at.Before(bestAt) {
			best, bestAt = ep, at
		}
	}
	return best
}

// healthy reports whether some endpoint other than ep takes requests and is
// not resting.
func (c *Client) healthy(ep *endpoint) bool {
	now := time.Now()
	for _, e := range c.eps {
		if e != ep && !e.out.Load() && !e.until().After(now) {
			return true
		}
	}
	return false
}

func (e *endpoint) until() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.downUntil
}

// failed records a failed attempt at e and keeps e out of the rotation for
// at least wait, and for longer when e has failed several times in a row:
// the backoff of its own run of failures (base doubling up to limit), so
// that a server that is down stops taking a share of every request's
// attempts while the live ones answer. It returns how long e rests.
func (e *endpoint) failed(now time.Time, wait, base, limit time.Duration, key uint64) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fails++
	wait = max(wait, backoff(base, limit, key, e.fails))
	if t := now.Add(wait); t.After(e.downUntil) {
		e.downUntil = t
	}
	return wait
}

// answered records an answer from e: its run of failures is over.
func (e *endpoint) answered() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fails = 0
}

// Run sends n requests, req(i) for i in 0..n-1, with Options.Concurrency in
// flight, and hands each answer to emit in index order, from the calling
// goroutine. A *RejectError for one request is handed to emit as err (with a
// nil response) and the run goes on; any other failure, an error from emit, or
// the end of ctx stops the run: in-flight requests are cancelled and Run
// returns once they have ended.
func (c *Client) Run(ctx context.Context, n int, req func(i int) Request, emit func(i int, r *Response, err error) error) error {
	ctx, cancel := context.WithCancel(ctx)
	type result struct {
		i   int
		r   *Response
		err error
	}
	done := make(chan result, c.opt.Concurrency)
	pending := map[int]result{}
	next, emitted, inflight := 0, 0, 0
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait() // the channel has room for every in-flight result
	}()
	for emitted < n {
		for next < n && inflight < c.opt.Concurrency && next-emitted < c.opt.Window {
			i, r := next, req(next)
			next++
			inflight++
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := c.Do(ctx, r)
				done <- result{i, res, err}
			}()
		}
		var got result
		select {
		case got = <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		inflight--
		var rej *RejectError
		if got.err != nil && !errors.As(got.err, &rej) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return got.err
		}
		pending[got.i] = got
		for {
			p, ok := pending[emitted]
			if !ok {
				break
			}
			delete(pending, emitted)
			if err := emit(p.i, p.r, p.err); err != nil {
				return err
			}
			emitted++
		}
	}
	return nil
}
