// Package chat renders a Hugging Face model's chat template (the Jinja
// `chat_template` of tokenizer_config.json) the way transformers'
// apply_chat_template does, and locates the assistant turns in the rendered
// text so that training can restrict its loss to what the model itself says.
//
// Templates are executed by a copy of github.com/ardanlabs/jinja v1.8.0
// (internal/jinja) that bounds what one rendering may do: a template comes
// with the checkpoint, so it is code we run, and one that loops or grows
// without bound must stop with an error rather than hang, run out of memory
// or overflow the stack (see MaxTemplateSteps and the limits beside it).
// Messages, tools and extra variables are handed to the engine as ordered
// values, so that `tojson` and `items()` see keys in the order Python would
// (role, content, ... for messages; the file's order for JSON given as
// json.RawMessage).
package chat

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/drafter-ai/drafter/pkg/chat/internal/jinja"
)

// The limits of one rendering of a chat template, far above what any real
// template needs (a conversation of thousands of turns takes a few hundred
// thousand steps). They count work, not time, so that a rendering passes or
// fails alike on every machine.
const (
	// MaxTemplateSteps bounds the statements, expressions, loop iterations
	// and value elements visited in one rendering (a few seconds at most).
	MaxTemplateSteps = jinja.MaxSteps
	// MaxTemplateBytes bounds the rendered text and every string the
	// template builds.
	MaxTemplateBytes = jinja.MaxBytes
	// MaxTemplateWorkBytes bounds all the text one rendering builds, so
	// that copying a large string again and again stops too.
	MaxTemplateWorkBytes = jinja.MaxWorkBytes
	// MaxTemplateItems bounds a list or dict the template builds.
	MaxTemplateItems = jinja.MaxItems
	// MaxTemplateCallDepth bounds nested macro and caller() calls.
	MaxTemplateCallDepth = jinja.MaxCallDepth
	// MaxTemplateNesting bounds the nesting of the values the template
	// prints, compares or encodes (a list may hold itself).
	MaxTemplateNesting = jinja.MaxNesting
)

// The errors a rendering stopped by a limit wraps, one per kind of limit.
var (
	// ErrTemplateSteps: more than MaxTemplateSteps steps or
	// MaxTemplateWorkBytes of text built: the template loops without end.
	ErrTemplateSteps = jinja.ErrSteps
	// ErrTemplateSize: output or a value beyond MaxTemplateBytes or
	// MaxTemplateItems: the template grows without bound.
	ErrTemplateSize = jinja.ErrSize
	// ErrTemplateDepth: calls or values nested beyond MaxTemplateCallDepth
	// or MaxTemplateNesting: the template recurses without end.
	ErrTemplateDepth = jinja.ErrDepth
)

// Message is one turn of a conversation.
type Message struct {
	// Role is "system", "user", "assistant" or "tool" (templates may accept
	// others, e.g. "ipython").
	Role string
	// Content is the text of the turn.
	Content string
	// Name is the optional author name (OpenAI's "name" field).
	Name string
	// ToolCalls are the function calls an assistant turn made.
	ToolCalls []ToolCall
	// ToolCallID links a "tool" turn to the call it answers.
	ToolCallID string
	// Extra holds any further message fields (e.g. "reasoning_content"), in
	// order; each value is raw JSON and is decoded with its key order kept.
	Extra []Field
}

// ToolCall is one function call made by an assistant turn, in the OpenAI
// layout {"id", "type": "function", "function": {"name", "arguments"}}.
type ToolCall struct {
	// ID is the optional call id.
	ID string
	// Type is normally "function"; empty omits the key.
	Type string
	// Function is the called function.
	Function ToolFunction
}

// ToolFunction names a called function and its arguments.
type ToolFunction struct {
	// Name of the function.
	Name string
	// Arguments as raw JSON: an object (the Hugging Face convention) or a
	// string holding JSON (the OpenAI convention). Templates tell them apart
	// with `is string`. Empty means {}.
	Arguments json.RawMessage
}

// Field is one extra key of a message with its raw JSON value.
type Field struct {
	// Key is the field name.
	Key string
	// Value is the field's JSON encoding.
	Value json.RawMessage
}

// Options control one rendering.
type Options struct {
	// AddGenerationPrompt appends the header that asks the model for a new
	// assistant turn.
	AddGenerationPrompt bool
	// Tools are tool (function) definitions passed to the template as
	// `tools`. Each element may be a json.RawMessage or []byte (decoded
	// keeping key order), a jinja.Value, or a plain Go value (maps are then
	// rendered with sorted keys). Nil or empty passes tools=None.
	Tools []any
	// Name selects a named template when tokenizer_config.json holds a list
	// of them. Empty picks "tool_use" when Tools is non-empty and such a
	// template exists, else "default".
	Name string
	// Now is the time strftime_now() reports (Llama-3.x put today's date in
	// the system prompt). The zero value means the wall clock; set it for
	// reproducible renderings.
	Now time.Time
	// Vars are extra template variables (e.g. "enable_thinking": false),
	// converted like Tools elements. They cannot override messages, tools,
	// add_generation_prompt or the special-token variables.
	Vars map[string]any
}

// SpecialTokens are the token strings a template may refer to.
type SpecialTokens struct {
	// BOS, EOS, UNK and PAD are exposed as bos_token, eos_token, unk_token
	// and pad_token when non-empty (transformers leaves out unset ones).
	BOS, EOS, UNK, PAD string
	// Additional is exposed as additional_special_tokens when non-nil.
	Additional []string
	// Special lists every special token string of the vocabulary
	// (added_tokens_decoder entries with "special": true). AssistantSpans uses
	// it to find the end-of-turn marker; BOS/EOS/UNK/PAD/Additional are added
	// to it automatically.
	Special []string
}

// Template is a compiled chat template set. It is immutable after creation
// and safe for concurrent use.
type Template struct {
	source    string
	srcs      map[string]string
	templates map[string]*jinja.Template
	names     []string
	tokens    SpecialTokens
	special   []string // deduplicated, longest first
	eot       string
}

// Sources are a model's chat templates as found on disk, before compiling.
type Sources struct {
	// File is the file the templates were read from.
	File string
	// Templates maps each template's name to its Jinja source ("default"
	// for a single template).
	Templates map[string]string
	// Tokens are the special token strings of tokenizer_config.json.
	Tokens SpecialTokens
}

// ReadSources finds the chat template of the model in dir. It looks, in
// order, for chat_template.jinja (newer transformers save it there),
// chat_template.json ({"chat_template": ...}) and the chat_template field of
// tokenizer_config.json; special token strings always come from
// tokenizer_config.json when present. It returns (nil, nil) when the model
// has no chat template (e.g. base models such as stories260k).
func ReadSources(dir string) (*Sources, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	var cfg map[string]json.RawMessage
	raw, err := os.ReadFile(cfgPath)
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("chat: %s: invalid JSON: %w", cfgPath, err)
		}
	case errors.Is(err, os.ErrNotExist):
		cfg = nil
	default:
		return nil, fmt.Errorf("chat: %w", err)
	}
	tok, err := specialTokens(cfg, cfgPath)
	if err != nil {
		return nil, err
	}

	source := cfgPath
	var tmplField json.RawMessage
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		return &Sources{File: filepath.Join(dir, "chat_template.jinja"), Templates: map[string]string{"default": string(b)}, Tokens: tok}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.json")); err == nil {
		source = filepath.Join(dir, "chat_template.json")
		var f map[string]json.RawMessage
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("chat: %s: invalid JSON: %w", source, err)
		}
		tmplField = f["chat_template"]
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", err)
	} else {
		tmplField = cfg["chat_template"]
	}
	if len(tmplField) == 0 || string(tmplField) == "null" {
		return nil, nil
	}
	srcs, err := parseTemplateField(tmplField, source)
	if err != nil {
		return nil, err
	}
	return &Sources{File: source, Templates: srcs, Tokens: tok}, nil
}

// Load reads and compiles the chat template of the model in dir (see
// ReadSources for where it is found). It returns (nil, nil) when the model
// has no chat template.
func Load(dir string) (*Template, error) {
	s, err := ReadSources(dir)
	if err != nil || s == nil {
		return nil, err
	}
	return newTemplate(s.File, s.Templates, s.Tokens)
}

// Hash returns the hex SHA-256 of what renders a conversation: each
// template's name and source, in name order, and the special token strings.
// It does not depend on the file the templates came from, so a template moved
// from tokenizer_config.json to chat_template.jinja keeps its hash.
func (s *Sources) Hash() string {
	h := sha256.New()
	names := make([]string, 0, len(s.Templates))
	for name := range s.Templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(h, "template %q %d\n%s\n", name, len(s.Templates[name]), s.Templates[name])
	}
	t := s.Tokens
	fmt.Fprintf(h, "bos %q\neos %q\nunk %q\npad %q\n", t.BOS, t.EOS, t.UNK, t.PAD)
	if t.Additional == nil {
		fmt.Fprintf(h, "additional none\n")
	} else {
		fmt.Fprintf(h, "additional %q\n", t.Additional)
	}
	fmt.Fprintf(h, "special %q\n", t.Special)
	return hex.EncodeToString(h.Sum(nil))
}

// New compiles a single template source (registered as "default").
func New(src string, tok SpecialTokens) (*Template, error) {
	return newTemplate("template", map[string]string{"default": src}, tok)
}

// NewNamed compiles a set of named templates, as tokenizer_config.json's list
// form holds them.
func NewNamed(srcs map[string]string, tok SpecialTokens) (*Template, error) {
	return newTemplate("template", srcs, tok)
}

func newTemplate(source string, srcs map[string]string, tok SpecialTokens) (*Template, error) {
	if len(srcs) == 0 {
		return nil, fmt.Errorf("chat: %s: no chat template", source)
	}
	t := &Template{source: source, srcs: srcs, templates: make(map[string]*jinja.Template, len(srcs)), tokens: tok}
	for name, src := range srcs {
		c, err := jinja.Compile(src)
		if err != nil {
			return nil, fmt.Errorf("chat: %s: template %q: %w", source, name, err)
		}
		t.templates[name] = c
		t.names = append(t.names, name)
	}
	sort.Strings(t.names)
	t.special = collectSpecial(tok)
	t.eot = t.probeEndOfTurn()
	return t, nil
}

// Names returns the names of the templates in the set, sorted.
func (t *Template) Names() []string { return append([]string(nil), t.names...) }

// Source returns the file the template was read from.
func (t *Template) Source() string { return t.source }

// Hash returns the hex SHA-256 of the templates' sources and special tokens
// (Sources.Hash), independent of the file they came from.
func (t *Template) Hash() string {
	return (&Sources{Templates: t.srcs, Tokens: t.tokens}).Hash()
}

// EndOfTurn returns the marker the template emits after an assistant turn's
// content (e.g. "<|eot_id|>", "<|im_end|>", "</s>"), found by rendering a
// probe conversation; "" when the template emits no special token there.
func (t *Template) EndOfTurn() string { return t.eot }

func (t *Template) pick(opt Options) (string, *jinja.Template, error) {
	if opt.Name != "" {
		c, ok := t.templates[opt.Name]
		if !ok {
			return "", nil, fmt.Errorf("chat: %s: no template named %q (have %s)", t.source, opt.Name, strings.Join(t.names, ", "))
		}
		return opt.Name, c, nil
	}
	if len(opt.Tools) > 0 {
		if c, ok := t.templates["tool_use"]; ok {
			return "tool_use", c, nil
		}
	}
	if c, ok := t.templates["default"]; ok {
		return "default", c, nil
	}
	if len(t.names) == 1 {
		return t.names[0], t.templates[t.names[0]], nil
	}
	return "", nil, fmt.Errorf("chat: %s: no \"default\" template among %s; set a template name", t.source, strings.Join(t.names, ", "))
}

// Render renders msgs with the template chosen by opt.
func (t *Template) Render(msgs []Message, opt Options) (string, error) {
	name, c, err := t.pick(opt)
	if err != nil {
		return "", err
	}
	data, err := t.context(msgs, opt)
	if err != nil {
		return "", err
	}
	out, err := c.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("chat: rendering %s template %q: %w", t.source, name, err)
	}
	return out, nil
}

// context builds the template variables the way apply_chat_template does:
// messages, tools, documents, add_generation_prompt, the special tokens and
// any extra variables.
func (t *Template) context(msgs []Message, opt Options) (map[string]jinja.Value, error) {
	data := make(map[string]jinja.Value, 12+len(opt.Vars))
	for k, v := range opt.Vars {
		val, err := toValue(v)
		if err != nil {
			return nil, fmt.Errorf("chat: variable %q: %w", k, err)
		}
		data[k] = val
	}
	list := make([]jinja.Value, len(msgs))
	for i := range msgs {
		v, err := messageValue(&msgs[i])
		if err != nil {
			return nil, fmt.Errorf("chat: message %d (%s): %w", i, msgs[i].Role, err)
		}
		list[i] = v
	}
	data["messages"] = jinja.NewList(list)
	data["add_generation_prompt"] = jinja.NewBool(opt.AddGenerationPrompt)
	data["documents"] = jinja.None()
	if len(opt.Tools) > 0 {
		tools := make([]jinja.Value, len(opt.Tools))
		for i, tv := range opt.Tools {
			v, err := toValue(tv)
			if err != nil {
				return nil, fmt.Errorf("chat: tool %d: %w", i, err)
			}
			tools[i] = v
		}
		data["tools"] = jinja.NewList(tools)
	} else {
		data["tools"] = jinja.None()
	}
	setStr := func(key, s string) {
		if s != "" {
			data[key] = jinja.NewString(s)
		}
	}
	setStr("bos_token", t.tokens.BOS)
	setStr("eos_token", t.tokens.EOS)
	setStr("unk_token", t.tokens.UNK)
	setStr("pad_token", t.tokens.PAD)
	if t.tokens.Additional != nil {
		items := make([]jinja.Value, len(t.tokens.Additional))
		for i, s := range t.tokens.Additional {
			items[i] = jinja.NewString(s)
		}
		data["additional_special_tokens"] = jinja.NewList(items)
	}
	now := opt.Now
	data["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), fmt.Errorf("strftime_now: expected one format string")
		}
		tm := now
		if tm.IsZero() {
			tm = time.Now()
		}
		return jinja.NewString(strftime(tm, args[0].AsString())), nil
	})
	data["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := "(no message)"
		if len(args) > 0 {
			msg = args[0].String()
			if args[0].IsString() {
				msg = args[0].AsString()
			}
		}
		return jinja.Undefined(), fmt.Errorf("the chat template rejected the conversation: %s", msg)
	})
	return data, nil
}

// specialTokens reads the special token strings of tokenizer_config.json.
// Each may be a string, null or an AddedToken object {"content": ...}.
func specialTokens(cfg map[string]json.RawMessage, path string) (SpecialTokens, error) {
	var tok SpecialTokens
	if cfg == nil {
		return tok, nil
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"bos_token", &tok.BOS}, {"eos_token", &tok.EOS}, {"unk_token", &tok.UNK}, {"pad_token", &tok.PAD}} {
		raw, ok := cfg[f.key]
		if !ok {
			continue
		}
		s, err := tokenString(raw)
		if err != nil {
			return tok, fmt.Errorf("chat: %s: %s: %w", path, f.key, err)
		}
		*f.dst = s
	}
	if raw, ok := cfg["additional_special_tokens"]; ok && string(raw) != "null" {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return tok, fmt.Errorf("chat: %s: additional_special_tokens: expected a list: %w", path, err)
		}
		tok.Additional = make([]string, 0, len(items))
		for i, it := range items {
			s, err := tokenString(it)
			if err != nil {
				return tok, fmt.Errorf("chat: %s: additional_special_tokens[%d]: %w", path, i, err)
			}
			tok.Additional = append(tok.Additional, s)
		}
	}
	if raw, ok := cfg["added_tokens_decoder"]; ok && string(raw) != "null" {
		var dec map[string]struct {
			Content string `json:"content"`
			Special bool   `json:"special"`
		}
		if err := json.Unmarshal(raw, &dec); err != nil {
			return tok, fmt.Errorf("chat: %s: added_tokens_decoder: expected {id: {content, special}}: %w", path, err)
		}
		for _, d := range dec {
			if d.Special && d.Content != "" {
				tok.Special = append(tok.Special, d.Content)
			}
		}
		sort.Strings(tok.Special)
	}
	return tok, nil
}

// tokenString decodes a special token given as a string, null, or an
// AddedToken object.
func tokenString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("expected a string or an object with \"content\", got %.60s", raw)
	}
	return *obj.Content, nil
}

// parseTemplateField decodes chat_template: a string or a list of
// {"name", "template"} objects.
func parseTemplateField(raw json.RawMessage, path string) (map[string]string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return map[string]string{"default": s}, nil
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("chat: %s: chat_template: expected a string or a list of {\"name\", \"template\"}: %w", path, err)
	}
	out := make(map[string]string, len(list))
	for i, e := range list {
		if e.Name == nil || e.Template == nil {
			return nil, fmt.Errorf("chat: %s: chat_template[%d]: expected {\"name\": string, \"template\": string}", path, i)
		}
		if _, dup := out[*e.Name]; dup {
			return nil, fmt.Errorf("chat: %s: chat_template[%d]: duplicate name %q", path, i, *e.Name)
		}
		out[*e.Name] = *e.Template
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("chat: %s: chat_template is an empty list", path)
	}
	return out, nil
}

func collectSpecial(tok SpecialTokens) []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, s := range tok.Special {
		add(s)
	}
	add(tok.BOS)
	add(tok.EOS)
	add(tok.UNK)
	add(tok.PAD)
	for _, s := range tok.Additional {
		add(s)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) > len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}
