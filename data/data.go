// Package data reads the prompt datasets that `drafter distill` answers and
// the conversations that `drafter capture` replays through the model, and
// turns them into model input.
//
// Accepted files (one record per line, UTF-8, blank lines ignored):
//
// Bytes that are not UTF-8 are read by one rule in every format: each such
// byte becomes U+FFFD, as JSON decoding reads it inside a string, before
// anything reads the line, and the replacement is reported naming the file
// and line (ReadOptions.Warn). A .txt prompt and a .jsonl prompt with the
// same bytes are then the same text with the same ids, and the prompt a run
// records as JSON reproduces the ids it captured (raw bytes could not be
// recorded in JSON at all).
//
//   - JSONL with one of
//     {"prompt": "raw text"} (completion style: the text goes to the model
//     as-is, no chat template),
//     {"messages": [{"role": ..., "content": ...}, ...]} (OpenAI chat), or
//     {"conversations": [{"from": ..., "value": ...}, ...]} (ShareGPT).
//     For conversations (ReadConversations) {"prompt": ..., "response": ...}
//     is also accepted. An optional "id" (string or number) is kept, and so
//     is an optional "tools" list (OpenAI tool definitions) beside
//     "messages"/"conversations", which Render hands to the template; other
//     keys are ignored.
//   - .txt (prompts only): one raw-text prompt per line.
//
// OpenAI messages: role is system, user, assistant or tool ("developer", the
// newer name for system, is read as system); content is a string, null
// (assistant turns with tool_calls) or a list of {"type": "text", "text":
// ...} parts, which are concatenated; name, tool_calls and tool_call_id are
// kept, any other field is passed to the template unchanged.
//
// ShareGPT "from" values: human, user -> user; gpt, assistant, chatgpt,
// bard, model, function_call -> assistant; system -> system; tool, function,
// observation, function_response, ipython -> tool. Elements written as
// {"role", "content"} inside "conversations" are read as OpenAI messages.
package data

//go:generate go run ./prompts/genstories -dir prompts

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/drafter-ai/drafter/pkg/chat"
	"github.com/drafter-ai/drafter/pkg/tokenizer"
)

// MaxLineBytes is the default longest record line accepted (64 MiB).
const MaxLineBytes = 64 << 20

// ReadOptions control reading a dataset.
type ReadOptions struct {
	// SkipInvalid counts malformed records and skips them instead of
	// failing on the first one.
	SkipInvalid bool
	// MaxLineBytes bounds one line; longer lines are malformed records.
	// Zero means MaxLineBytes.
	MaxLineBytes int
	// Warn receives one line per record whose bytes were not all UTF-8
	// (see the package doc), naming the file and line. nil means
	// os.Stderr: a changed prompt is never silent; io.Discard drops them.
	Warn io.Writer
}

func (o ReadOptions) warn() io.Writer {
	if o.Warn != nil {
		return o.Warn
	}
	return os.Stderr
}

// toUTF8 returns b with every byte that is not part of a UTF-8 encoding
// replaced by U+FFFD, one per byte (as encoding/json and Go's range over a
// string read them; strings.ToValidUTF8 would merge runs, and then a .txt
// prompt would read other text than the same bytes in a JSON string), and
// the number of bytes replaced. b itself is returned when it is valid.
func toUTF8(b []byte) ([]byte, int) {
	if utf8.Valid(b) {
		return b, 0
	}
	out := make([]byte, 0, len(b)+16)
	n := 0
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
			n++
		} else {
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	return out, n
}

// firstInvalid returns the offset of b's first byte that is not part of a
// UTF-8 encoding (len(b) when there is none).
func firstInvalid(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// warnReplaced reports n bytes of path's line that were not UTF-8.
func (o ReadOptions) warnReplaced(path string, line, n int) {
	what := fmt.Sprintf("%d bytes are", n)
	if n == 1 {
		what = "1 byte is"
	}
	fmt.Fprintf(o.warn(), "warning: %s:%d: %s not UTF-8 and read as U+FFFD (the replacement character), one per byte; the record is tokenized and recorded so: fix the file's encoding if that is not what you meant\n", path, line, what)
}

func (o ReadOptions) maxLine() int {
	if o.MaxLineBytes > 0 {
		return o.MaxLineBytes
	}
	return MaxLineBytes
}

// Prompt is one prompt to answer. Exactly one of Text and Messages is set.
type Prompt struct {
	// Index is the 0-based position among the prompts returned.
	Index int
	// Line is the 1-based line of the file the prompt came from.
	Line int
	// ID is the record's optional "id" (numbers are kept as their JSON text).
	ID string
	// Text is a raw-text prompt, given to the model as-is.
	Text string
	// Messages is a chat conversation, without any trailing assistant turn
	// (the model is asked to write it).
	Messages []chat.Message
	// Tools are the record's "tools" definitions (raw JSON objects, key
	// order kept), handed to the chat template.
	Tools []json.RawMessage
}

// IsChat reports whether the prompt is a conversation (rendered through the
// chat template) rather than raw text.
func (p *Prompt) IsChat() bool { return p.Messages != nil }

// Conversation is one prompt with its answer, for capture. Either Prompt and
// Response (raw text) or Messages (with at least one assistant turn) is set.
type Conversation struct {
	// Index is the 0-based position among the conversations returned.
	Index int
	// Line is the 1-based line of the file.
	Line int
	// ID is the record's optional "id".
	ID string
	// Prompt and Response are a raw-text pair: the model input is
	// Prompt+Response, concatenated as they are.
	Prompt, Response string
	// Messages is a chat conversation including its assistant turns.
	Messages []chat.Message
	// Tools are the record's "tools" definitions, as for Prompt.
	Tools []json.RawMessage
}

// IsChat reports whether the conversation goes through the chat template.
func (c *Conversation) IsChat() bool { return c.Messages != nil }

// ReadPrompts reads a prompt dataset (JSONL or .txt). A trailing assistant
// turn of a conversation is dropped so that the model regenerates it. A
// malformed record is an error naming file, line and what was expected;
// with opt.SkipInvalid it is counted in skipped instead.
func ReadPrompts(path string, opt ReadOptions) (prompts []Prompt, skipped int, err error) {
	txt := strings.EqualFold(filepath.Ext(path), ".txt")
	err = eachLine(path, opt.maxLine(), func(line int, b []byte, lineErr error) error {
		if lineErr == nil && len(bytes.TrimSpace(b)) == 0 {
			return nil
		}
		var p Prompt
		replaced := 0
		if lineErr == nil {
			b, replaced = toUTF8(b)
			if txt {
				p.Text = string(b)
			} else {
				var r record
				r, lineErr = parseRecord(b, false)
				p.ID, p.Text, p.Messages, p.Tools = r.id, r.prompt, r.messages, r.tools
			}
		}
		if lineErr != nil {
			if opt.SkipInvalid {
				skipped++
				return nil
			}
			return fmt.Errorf("data: %s:%d: %w", path, line, lineErr)
		}
		if replaced > 0 {
			opt.warnReplaced(path, line, replaced)
		}
		p.Index, p.Line = len(prompts), line
		prompts = append(prompts, p)
		return nil
	})
	if err != nil {
		return nil, skipped, err
	}
	return prompts, skipped, nil
}

// ReadConversations reads conversations for capture: the JSONL formats of
// ReadPrompts with their assistant turns kept (at least one is required), or
// {"prompt", "response"} raw-text pairs. Turns after the last assistant turn
// are kept; they are context the loss mask leaves out.
func ReadConversations(path string, opt ReadOptions) (convs []Conversation, skipped int, err error) {
	if strings.EqualFold(filepath.Ext(path), ".txt") {
		return nil, 0, fmt.Errorf("data: %s: a .txt file holds prompts only; conversations need JSONL with \"messages\", \"conversations\" or \"prompt\"+\"response\"", path)
	}
	err = eachLine(path, opt.maxLine(), func(line int, b []byte, lineErr error) error {
		if lineErr == nil && len(bytes.TrimSpace(b)) == 0 {
			return nil
		}
		var r record
		replaced := 0
		if lineErr == nil {
			b, replaced = toUTF8(b)
			r, lineErr = parseRecord(b, true)
		}
		if lineErr != nil {
			if opt.SkipInvalid {
				skipped++
				return nil
			}
			return fmt.Errorf("data: %s:%d: %w", path, line, lineErr)
		}
		if replaced > 0 {
			opt.warnReplaced(path, line, replaced)
		}
		convs = append(convs, Conversation{Index: len(convs), Line: line, ID: r.id, Prompt: r.prompt, Response: r.response, Messages: r.messages, Tools: r.tools})
		return nil
	})
	if err != nil {
		return nil, skipped, err
	}
	return convs, skipped, nil
}

// eachLine streams the lines of path (without "\n" or "\r\n"; a leading
// UTF-8 byte-order mark is dropped) to fn with 1-based line numbers. Lines
// over maxLine bytes are passed with an error and no bytes. The slice is
// valid only during the call.
func eachLine(path string, maxLine int, fn func(line int, b []byte, err error) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var buf []byte
	for line := 1; ; line++ {
		buf = buf[:0]
		tooLong := false
		var rerr error
		for {
			chunk, err := r.ReadSlice('\n')
			if !tooLong {
				if len(buf)+len(chunk) > maxLine+2 { // +2: the "\r\n" trimmed below
					tooLong = true
					buf = buf[:0]
				} else {
					buf = append(buf, chunk...)
				}
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			rerr = err
			break
		}
		if rerr != nil && rerr != io.EOF {
			return fmt.Errorf("data: %s:%d: %w", path, line, rerr)
		}
		if rerr == io.EOF && len(buf) == 0 && !tooLong {
			return nil
		}
		b := bytes.TrimSuffix(buf, []byte{'\n'})
		b = bytes.TrimSuffix(b, []byte{'\r'})
		if line == 1 {
			b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
		}
		var lerr error
		if tooLong || len(b) > maxLine {
			lerr, b = fmt.Errorf("line longer than %d bytes (ReadOptions.MaxLineBytes)", maxLine), nil
		}
		if err := fn(line, b, lerr); err != nil {
			return err
		}
		if rerr == io.EOF {
			return nil
		}
	}
}

// PromptHash returns the hex SHA-256 of the file's bytes, to record which
// dataset a run used.
func PromptHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("data: hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ErrNoChatTemplate is returned when a conversation is rendered for a model
// without a chat template.
var ErrNoChatTemplate = errors.New(`model has no chat template; use {"prompt": ...} lines (raw text) for it`)

// Render returns the model input for a prompt. A conversation goes through
// the chat template with add_generation_prompt=true; raw text is returned
// as-is, never wrapped in the template, even when the model has one (raw
// prompts are for completion-style use; write {"messages": ...} to chat).
//
// Tokenize the result the way transformers does: templated text with
// addSpecial=false (templates write BOS themselves, e.g. Llama-3's
// {{ bos_token }}; adding it again doubles it), raw text with
// addSpecial=true. Prompt.IsChat tells which.
func Render(p Prompt, tmpl *chat.Template) (string, error) {
	return RenderWith(p, tmpl, chat.Options{})
}

// RenderWith is Render with template options (tools, variables such as
// "enable_thinking", a fixed time); AddGenerationPrompt is forced on. The
// prompt's own Tools are used when opt.Tools is empty.
func RenderWith(p Prompt, tmpl *chat.Template, opt chat.Options) (string, error) {
	if !p.IsChat() {
		return p.Text, nil
	}
	if tmpl == nil {
		return "", fmt.Errorf("data: prompt %d (line %d): %w", p.Index, p.Line, ErrNoChatTemplate)
	}
	opt.AddGenerationPrompt = true
	opt.Tools = withTools(opt.Tools, p.Tools)
	s, err := tmpl.Render(p.Messages, opt)
	if err != nil {
		return "", fmt.Errorf("data: prompt %d (line %d): %w", p.Index, p.Line, err)
	}
	return s, nil
}

// Encode returns the token ids a model with tokenizer tok and chat template
// tmpl (nil when it has none) is fed for a prompt: a conversation is rendered
// with Render and tokenized without special tokens (the template writes BOS
// itself); raw text is tokenized with the post-processor (BOS where the
// tokenizer adds one).
func Encode(p Prompt, tok *tokenizer.Tokenizer, tmpl *chat.Template) ([]int, error) {
	if !p.IsChat() {
		return tok.Encode(p.Text, true), nil
	}
	text, err := Render(p, tmpl)
	if err != nil {
		return nil, err
	}
	return tok.Encode(text, false), nil
}

// RenderConversation returns the model input for a conversation and the
// byte spans of the text the model is trained to produce: for chat, the
// assistant turns with their end-of-turn markers (chat.AssistantSpans); for
// a raw pair, the Response (no end marker: append EOS when tokenizing if the
// response ended with one). Tokenize chat text with addSpecial=false and raw
// text with addSpecial=true, as for Render. The conversation's own Tools are
// used when opt.Tools is empty.
func RenderConversation(c Conversation, tmpl *chat.Template, opt chat.Options) (text string, spans [][2]int, err error) {
	if !c.IsChat() {
		text = c.Prompt + c.Response
		return text, [][2]int{{len(c.Prompt), len(text)}}, nil
	}
	if tmpl == nil {
		return "", nil, fmt.Errorf("data: conversation %d (line %d): %w", c.Index, c.Line, ErrNoChatTemplate)
	}
	opt.Tools = withTools(opt.Tools, c.Tools)
	text, spans, err = tmpl.AssistantSpansWith(c.Messages, opt)
	if err != nil {
		return "", nil, fmt.Errorf("data: conversation %d (line %d): %w", c.Index, c.Line, err)
	}
	return text, spans, nil
}

// withTools returns opt when set, else the record's tools.
func withTools(opt []any, rec []json.RawMessage) []any {
	if len(opt) > 0 || len(rec) == 0 {
		return opt
	}
	out := make([]any, len(rec))
	for i, t := range rec {
		out[i] = t
	}
	return out
}

// ReadMessagesFile reads a conversation stored as one JSON list of OpenAI-style
// messages ({"role": ..., "content": ...}), as `drafter tokenize --chat` takes.
// Bytes that are not UTF-8 are read as in the datasets (see the package doc),
// and reported to opt.Warn with the line of the first; only opt.Warn applies.
func ReadMessagesFile(path string, opt ReadOptions) ([]chat.Message, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if fixed, n := toUTF8(b); n > 0 {
		first := 1 + bytes.Count(b[:firstInvalid(b)], []byte{'\n'})
		opt.warnReplaced(path, first, n)
		b = fixed
	}
	msgs, err := parseMessages(json.RawMessage(bytes.TrimSpace(b)), "messages", false)
	if err != nil {
		return nil, fmt.Errorf("data: %s: %w", path, err)
	}
	return msgs, nil
}
