package completions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// StatusError is an answer with a status other than 2xx. Message is the
// server's own explanation (the JSON error message, else the body).
type StatusError struct {
	URL     string
	Status  int
	Message string
	// RetryAfter is the wait the server asked for (Retry-After), -1 if none.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "(no message)"
	}
	return fmt.Sprintf("%s answered %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), msg)
}

// Temporary reports whether the request may succeed when sent again: 408,
// 429 and 5xx.
func (e *StatusError) Temporary() bool {
	return e.Status == http.StatusRequestTimeout || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// transportError is a request that got no complete answer: no connection, a
// dropped connection, or no answer within the attempt timeout.
type transportError struct {
	url     string
	timeout bool
	limit   time.Duration
	err     error
}

func (e *transportError) Error() string {
	if e.timeout {
		return fmt.Sprintf("%s: no complete answer within %s (the per-request timeout)", e.url, e.limit)
	}
	return fmt.Sprintf("%s: %v", e.url, e.err)
}

func (e *transportError) Unwrap() error { return e.err }

// protocolError is a 2xx answer that is not what the API promises: the
// server speaks another API, or the answer contradicts itself. Sending the
// request again would not help.
type protocolError struct {
	url string
	err error
}

func (e *protocolError) Error() string {
	return fmt.Sprintf("%s: %v (is the server of the kind the API option says?)", e.url, e.err)
}

func (e *protocolError) Unwrap() error { return e.err }

// RejectError is an answer that cannot be used for this one sample, although
// the server and the run are fine: a prompt the server tokenized differently
// (TGI), or text that does not re-tokenize to itself (Retokenize). The caller
// reports and skips the sample.
type RejectError struct {
	Key    uint64
	Reason string
}

func (e *RejectError) Error() string { return fmt.Sprintf("request %d: %s", e.Key, e.Reason) }

// RequestError is a request that failed for good (Client.Do): a server's
// refusal, a protocol error, its retries spent, or a *RejectError. Key is the
// request's key, so that the caller can name what it stands for (a prompt's
// file and line) rather than a request number.
type RequestError struct {
	Key uint64
	Err error
}

// Error names the request and why it failed, as errors of Do always read.
func (e *RequestError) Error() string {
	return fmt.Sprintf("completions: request %d: %v", e.Key, e.Err)
}

// Unwrap returns why the request failed.
func (e *RequestError) Unwrap() error { return e.Err }

// ModelError is an answer that names another model than the one requested
// (and than Options.AllowServedModel): a router or gateway in front of the
// engines answering from another model, whose answers would train the
// drafter for the wrong checkpoint. Sending the request again would not help.
type ModelError struct {
	URL, Requested, Served string
}

// Error names the server and both models.
func (e *ModelError) Error() string {
	return fmt.Sprintf("%s answered from model %q, but model %q was requested: its answers are refused (something in front of the engines, or the engine itself, serves another model under this name)",
		e.URL, e.Served, e.Requested)
}

// MaxRetryAfter caps the wait a server may ask for with Retry-After: a
// gateway asking for an hour (a rate limit meant for people, a
// misconfiguration) would otherwise stall the run that long with nothing
// to show; after MaxRetryAfter the request is tried again and the server
// may ask again. Retry.Asked reports a wait that was cut.
const MaxRetryAfter = 60 * time.Second

// retryable reports whether err may go away on another attempt, and the wait
// the server asked for (-1 if none).
func retryable(err error) (bool, time.Duration) {
	var te *transportError
	if errors.As(err, &te) {
		return true, -1
	}
	var se *StatusError
	if errors.As(err, &se) && se.Temporary() {
		return true, se.RetryAfter
	}
	return false, -1
}

// retry calls f with attempts 1, 2, ... until it succeeds, fails for good, or
// MaxAttempts is reached. f returns the endpoint it used; after a temporary
// failure that endpoint rests for the backoff (or the server's Retry-After, at
// most MaxRetryAfter, or its own run of failures' backoff when longer:
// endpoint.failed).
// With failover the next attempt starts at once when another endpoint is
// healthy (f picks it); otherwise it follows that wait.
func (c *Client) retry(ctx context.Context, key uint64, failover bool, f func(ctx context.Context, attempt int) (*endpoint, error)) error {
	for attempt := 1; ; attempt++ {
		ep, err := f(ctx, attempt)
		if err == nil {
			ep.answered()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ok, after := retryable(err)
		if !ok {
			return err
		}
		if attempt >= c.opt.MaxAttempts {
			return fmt.Errorf("giving up after %d attempts: %w", attempt, err)
		}
		var asked time.Duration
		if after > MaxRetryAfter {
			asked, after = after, MaxRetryAfter
		}
		wait := backoff(c.opt.Backoff, c.opt.MaxBackoff, key, attempt)
		wait = ep.failed(time.Now(), max(wait, after), c.opt.Backoff, c.opt.MaxBackoff, key)
		if failover && c.healthy(ep) {
			wait, asked = 0, 0 // another server takes it: the cap changed nothing
		}
		if c.opt.OnRetry != nil {
			c.opt.OnRetry(Retry{URL: ep.base, Key: key, Attempt: attempt, MaxAttempts: c.opt.MaxAttempts, Err: err, Wait: wait, Asked: asked})
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// backoff is the wait after failed attempt n (1-based) of the request with
// key: base*2^(n-1), at most limit, times a factor in [0.5, 1) that is a pure
// function of (key, n), so that requests failing together do not retry
// together, and a rerun waits the same.
func backoff(base, limit time.Duration, key uint64, n int) time.Duration {
	d := limit
	if n-1 < 62 && base<<(n-1) > 0 && base<<(n-1) < limit {
		d = base << (n - 1)
	}
	u := float64(mix(key, uint64(n))>>11) * 0x1p-53
	return time.Duration(float64(d) * (0.5 + 0.5*u))
}

// mix hashes two words (SplitMix64's finaliser over their combination).
func mix(a, b uint64) uint64 {
	z := a*0x9e3779b97f4a7c15 + b + 0x632be59bd9b4e019
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryAfter parses a Retry-After header (seconds or an HTTP date); -1 when
// absent or unreadable.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return -1
	}
	if s, err := strconv.ParseFloat(h, 64); err == nil && s >= 0 && s < 1e6 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0)
	}
	return -1
}

// serverMessage extracts the explanation from an error body: OpenAI's
// {"error": {"message"}}, {"error": "..."} (TGI, llama.cpp's older form),
// {"message"} (SGLang), FastAPI's {"detail"}; else the body itself.
func serverMessage(body []byte) string {
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) == nil {
		if e, ok := doc["error"]; ok {
			var obj struct {
				Message string `json:"message"`
			}
			var s string
			if json.Unmarshal(e, &obj) == nil && obj.Message != "" {
				return obj.Message
			}
			if json.Unmarshal(e, &s) == nil && s != "" {
				return s
			}
		}
		for _, k := range []string{"message", "detail"} {
			if v, ok := doc[k]; ok {
				var s string
				if json.Unmarshal(v, &s) == nil && s != "" {
					return s
				}
				return clip(v)
			}
		}
	}
	return clip(body)
}

// clip returns b as text, cut to 500 bytes.
func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}
