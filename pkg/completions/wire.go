package completions

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// openAIRequest is the body of POST /v1/completions. Every field is one vLLM
// knows (it logs a warning per request for fields it does not); SGLang and
// llama-server ignore the ones they lack.
type openAIRequest struct {
	Model       string  `json:"model,omitempty"`
	Prompt      []int   `json:"prompt"`
	MaxTokens   int     `json:"max_tokens"`
	Temperature float64 `json:"temperature"`
	TopP        float64 `json:"top_p"`
	// TopK -1 disables top-k everywhere: vLLM accepts it as "disabled",
	// SGLang requires it, llama-server disables top-k at k <= 0.
	TopK                   int     `json:"top_k"`
	MinP                   float64 `json:"min_p"`
	Seed                   int64   `json:"seed"`
	StopTokenIDs           []int   `json:"stop_token_ids,omitempty"`
	ReturnTokenIDs         bool    `json:"return_token_ids"`
	Logprobs               int     `json:"logprobs"`
	ReturnTokensAsTokenIDs bool    `json:"return_tokens_as_token_ids"`
}

// llamaRequest is the body of llama-server's POST /completion. Every sampler
// of its default chain that drafter does not apply is set to its neutral
// value or left out of "samplers".
type llamaRequest struct {
	Prompt        []int    `json:"prompt"`
	NPredict      int      `json:"n_predict"`
	Temperature   float64  `json:"temperature"`
	TopK          int      `json:"top_k"`
	TopP          float64  `json:"top_p"`
	MinP          float64  `json:"min_p"`
	Seed          int64    `json:"seed"`
	Samplers      []string `json:"samplers"`
	RepeatPenalty float64  `json:"repeat_penalty"`
	ReturnTokens  bool     `json:"return_tokens"`
}

// llamaSamplers is Hugging Face's order (temperature, top-k, top-p, min-p).
var llamaSamplers = []string{"temperature", "top_k", "top_p", "min_p"}

// tgiRequest is the body of TGI's POST /generate. TGI rejects temperature
// 0, top_p 1 and top_k 0 (router/src/validation.rs), so disabled settings are
// left out, and greedy decoding is do_sample false with no sampling field.
type tgiRequest struct {
	Inputs     string    `json:"inputs"`
	Parameters tgiParams `json:"parameters"`
}

type tgiParams struct {
	MaxNewTokens        int      `json:"max_new_tokens"`
	DoSample            bool     `json:"do_sample"`
	Temperature         *float64 `json:"temperature,omitempty"`
	TopK                *int     `json:"top_k,omitempty"`
	TopP                *float64 `json:"top_p,omitempty"`
	Seed                *int64   `json:"seed,omitempty"`
	Details             bool     `json:"details"`
	DecoderInputDetails bool     `json:"decoder_input_details"`
	ReturnFullText      bool     `json:"return_full_text"`
}

// requestBody returns the path and the JSON body of r for api: a pure
// function of its arguments.
func requestBody(api API, model string, r *Request) (string, []byte, error) {
	s := r.Sampling
	topP := s.TopP
	if topP == 0 {
		topP = 1
	}
	var path string
	var v any
	switch api {
	case OpenAI:
		topK := s.TopK
		if topK == 0 {
			topK = -1
		}
		path = "/v1/completions"
		v = openAIRequest{Model: model, Prompt: r.Prompt, MaxTokens: r.MaxTokens, Temperature: s.Temperature, TopP: topP,
			TopK: topK, MinP: s.MinP, Seed: r.Seed, StopTokenIDs: r.Stop, ReturnTokenIDs: true, Logprobs: 1, ReturnTokensAsTokenIDs: true}
	case LlamaCpp:
		path = "/completion"
		v = llamaRequest{Prompt: r.Prompt, NPredict: r.MaxTokens, Temperature: s.Temperature, TopK: s.TopK, TopP: topP,
			MinP: s.MinP, Seed: r.Seed, Samplers: llamaSamplers, RepeatPenalty: 1, ReturnTokens: true}
	case TGI:
		path = "/generate"
		p := tgiParams{MaxNewTokens: r.MaxTokens, Details: true, DecoderInputDetails: true}
		if s.Temperature > 0 {
			p.DoSample = true
			t, seed := s.Temperature, r.Seed
			p.Temperature, p.Seed = &t, &seed
			if s.TopK > 0 {
				k := s.TopK
				p.TopK = &k
			}
			if topP < 1 {
				p.TopP = &topP
			}
		}
		v = tgiRequest{Inputs: r.PromptText, Parameters: p}
	default:
		return "", nil, fmt.Errorf("completions: unknown API %q", api)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", nil, fmt.Errorf("completions: encoding request %d: %w", r.Key, err)
	}
	return path, b, nil
}

// openAIResponse is what /v1/completions answers (the fields read).
type openAIResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Text         string          `json:"text"`
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`  // vLLM: the stop id or string, null for EOS
		MatchedStop  json.RawMessage `json:"matched_stop"` // SGLang: the same
		TokenIDs     *[]int          `json:"token_ids"`
		Logprobs     *struct {
			Tokens  []string `json:"tokens"`
			Content []struct {
				ID *int `json:"id"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens *int `json:"completion_tokens"`
	} `json:"usage"`
}

// llamaResponse is what llama-server's /completion answers.
type llamaResponse struct {
	Content         string `json:"content"`
	Tokens          *[]int `json:"tokens"`
	StopType        string `json:"stop_type"`
	Model           string `json:"model"`
	TokensPredicted *int   `json:"tokens_predicted"`
}

// tgiResponse is what TGI's /generate answers.
type tgiResponse struct {
	GeneratedText string `json:"generated_text"`
	Details       *struct {
		FinishReason    string              `json:"finish_reason"`
		GeneratedTokens *int                `json:"generated_tokens"`
		Prefill         []struct{ ID int }  `json:"prefill"`
		Tokens          []struct{ ID *int } `json:"tokens"`
	} `json:"details"`
}

// errAborted is a generation the server ended without finishing it (SGLang's
// finish_reason "abort", llama-server's stop_type "none"): worth another try.
var errAborted = errors.New("the server aborted the generation")

// decodeResponse reads the answer to r. Ids come from the first source the
// answer holds (see the package doc); the stop handling is left to finish.
func decodeResponse(api API, raw []byte, r *Request) (*Response, error) {
	res := &Response{CompletionTokens: -1, StopID: -1, key: r.Key, stop: r.Stop, maxTokens: r.MaxTokens}
	switch api {
	case OpenAI:
		var doc openAIResponse
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("reading the completion: %w", err)
		}
		if len(doc.Choices) != 1 {
			return nil, fmt.Errorf("the completion has %d choices, want 1: %s", len(doc.Choices), clip(raw))
		}
		ch := doc.Choices[0]
		res.Model, res.Text = doc.Model, ch.Text
		if doc.Usage != nil && doc.Usage.CompletionTokens != nil {
			res.CompletionTokens = *doc.Usage.CompletionTokens
		}
		if ch.FinishReason == nil {
			return nil, fmt.Errorf("the completion has no finish_reason: %s", clip(raw))
		}
		switch *ch.FinishReason {
		case "stop":
			res.Finish = FinishStop
		case "length":
			res.Finish = FinishLength
		case "abort":
			return nil, &transportError{url: "the server", err: errAborted}
		default:
			return nil, fmt.Errorf("finish_reason %q: want stop or length", *ch.FinishReason)
		}
		for _, m := range []json.RawMessage{ch.StopReason, ch.MatchedStop} {
			var id int
			if len(m) > 0 && json.Unmarshal(m, &id) == nil {
				res.StopID = id
			}
		}
		switch {
		case ch.TokenIDs != nil:
			res.IDs, res.Source = *ch.TokenIDs, SourceTokenIDs
		case ch.Logprobs != nil && len(ch.Logprobs.Tokens) > 0 && strings.HasPrefix(ch.Logprobs.Tokens[0], "token_id:"):
			ids := make([]int, len(ch.Logprobs.Tokens))
			for i, t := range ch.Logprobs.Tokens {
				n, err := strconv.Atoi(strings.TrimPrefix(t, "token_id:"))
				if err != nil || !strings.HasPrefix(t, "token_id:") {
					return nil, fmt.Errorf("logprobs.tokens[%d] is %q, want token_id:N like the others", i, t)
				}
				ids[i] = n
			}
			res.IDs, res.Source = ids, SourceLogprobTokens
		case ch.Logprobs != nil && len(ch.Logprobs.Content) > 0 && ch.Logprobs.Content[0].ID != nil:
			ids := make([]int, len(ch.Logprobs.Content))
			for i, t := range ch.Logprobs.Content {
				if t.ID == nil {
					return nil, fmt.Errorf("logprobs.content[%d] has no id, unlike the others", i)
				}
				ids[i] = *t.ID
			}
			res.IDs, res.Source = ids, SourceLogprobIDs
		default:
			res.Source = SourceText
		}
	case LlamaCpp:
		var doc llamaResponse
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("reading the completion: %w", err)
		}
		res.Model, res.Text = doc.Model, doc.Content
		if doc.TokensPredicted != nil {
			res.CompletionTokens = *doc.TokensPredicted
		}
		switch doc.StopType {
		case "eos", "word":
			res.Finish = FinishStop
		case "limit":
			res.Finish = FinishLength
		case "none":
			return nil, &transportError{url: "the server", err: errAborted}
		default:
			return nil, fmt.Errorf("stop_type %q: want eos, word or limit (is this llama.cpp's /completion?)", doc.StopType)
		}
		if doc.Tokens != nil && len(*doc.Tokens) > 0 {
			res.IDs, res.Source = *doc.Tokens, SourceTokens
		} else {
			res.Source = SourceText
		}
	case TGI:
		var doc tgiResponse
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("reading the generation: %w", err)
		}
		d := doc.Details
		if d == nil {
			return nil, fmt.Errorf("the answer has no details (is this text-generation-inference's /generate?)")
		}
		res.Text = doc.GeneratedText
		if d.GeneratedTokens != nil {
			res.CompletionTokens = *d.GeneratedTokens
		}
		switch d.FinishReason {
		case "eos_token", "stop_sequence":
			res.Finish = FinishStop
		case "length":
			res.Finish = FinishLength
		default:
			return nil, fmt.Errorf("finish_reason %q: want eos_token, stop_sequence or length", d.FinishReason)
		}
		prefill := make([]int, len(d.Prefill))
		for i, p := range d.Prefill {
			prefill[i] = p.ID
		}
		if !slices.Equal(prefill, r.Prompt) {
			return nil, &RejectError{Key: r.Key, Reason: fmt.Sprintf("the server tokenized the prompt text to %s, not to the prompt's ids %s",
				shortIDs(prefill), shortIDs(r.Prompt))}
		}
		ids := make([]int, len(d.Tokens))
		for i, t := range d.Tokens {
			if t.ID == nil {
				return nil, fmt.Errorf("details.tokens[%d] has no id", i)
			}
			ids[i] = *t.ID
		}
		res.IDs, res.Source = ids, SourceDetails
	}
	return res, nil
}

// shortIDs prints ids, eliding the middle of long lists.
func shortIDs(ids []int) string {
	if len(ids) <= 16 {
		return fmt.Sprint(ids)
	}
	return fmt.Sprintf("%v ... %v (%d ids)", ids[:8], ids[len(ids)-8:], len(ids))
}

// finish checks the ids against the server's own count, cuts them after the
// first stop id, and appends the stop id a stopped generation lacks.
func (r *Response) finish() error {
	raw := len(r.IDs)
	for i, id := range r.IDs {
		if id < 0 {
			return fmt.Errorf("token id %d at position %d", id, i)
		}
	}
	if i := slices.IndexFunc(r.IDs, func(id int) bool { return slices.Contains(r.stop, id) }); i >= 0 {
		r.Cut = len(r.IDs) - 1 - i
		r.IDs = r.IDs[:i+1]
		r.Finish = FinishStop
	} else if r.Finish == FinishStop {
		switch {
		case r.StopID >= 0 && slices.Contains(r.stop, r.StopID):
			r.IDs = append(r.IDs, r.StopID)
		case len(r.stop) == 1:
			r.IDs = append(r.IDs, r.stop[0])
		default:
			return fmt.Errorf("the server says the generation stopped, but its ids do not end with any of the stop ids %v and it did not say which one it met", r.stop)
		}
		r.AddedStop = true
	}
	if r.Source == SourceText {
		raw = len(r.IDs) + r.Cut // the text leaves out the stop token the server counted
	}
	switch {
	case r.CompletionTokens >= 0 && r.CompletionTokens != raw:
		return fmt.Errorf("the server counted %d generated tokens but %d ids came back", r.CompletionTokens, raw)
	case len(r.IDs) == 0:
		return fmt.Errorf("no token was generated")
	case len(r.IDs) > r.maxTokens:
		return fmt.Errorf("%d tokens came back for a request of at most %d", len(r.IDs), r.maxTokens)
	}
	return nil
}

// Retokenize gives a text-only answer (Source SourceText) its ids: encode
// turns the text into ids (in the context of the prompt, so that the first
// token joins the prompt as the model would have produced it), which decode
// must turn back into exactly the text; the stop id is appended when the
// server says it stopped, and the count must equal the server's own. An
// answer failing any of these is a *RejectError: its real ids cannot be known,
// so the caller reports and skips the sample. Other sources are left alone.
func (r *Response) Retokenize(encode func(text string) ([]int, error), decode func(ids []int) string) error {
	if r.Source != SourceText {
		return nil
	}
	ids, err := encode(r.Text)
	if err != nil {
		return &RejectError{Key: r.key, Reason: fmt.Sprintf("re-tokenizing the text: %v", err)}
	}
	if back := decode(ids); back != r.Text {
		return &RejectError{Key: r.key, Reason: fmt.Sprintf("the text %q re-tokenizes to ids that decode to %q", clipText(r.Text), clipText(back))}
	}
	r.IDs = ids
	if err := r.finish(); err != nil {
		r.IDs = nil
		return &RejectError{Key: r.key, Reason: fmt.Sprintf("re-tokenized text: %v", err)}
	}
	return nil
}

func clipText(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
