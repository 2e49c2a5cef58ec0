package data

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/drafter-ai/drafter/pkg/chat"
)

// record is one parsed dataset line.
type record struct {
	id       string
	prompt   string // raw text
	response string // raw text answer (conversations only)
	messages []chat.Message
	tools    []json.RawMessage
}

// parseRecord parses one JSONL line. conv selects conversation rules
// (assistant turns kept and required, prompt+response pairs) over prompt
// rules (a trailing assistant turn dropped).
func parseRecord(b []byte, conv bool) (record, error) {
	var r record
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return r, fmt.Errorf("expected a JSON object such as %s", expectedKeys(conv))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return r, fmt.Errorf("invalid JSON: %v", err)
	}
	if raw, ok := obj["id"]; ok {
		id, err := parseID(raw)
		if err != nil {
			return r, err
		}
		r.id = id
	}
	if raw, ok := obj["tools"]; ok && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &r.tools); err != nil {
			return r, fmt.Errorf(`"tools": expected a list of tool definitions, got %s`, describe(raw))
		}
		for i, tl := range r.tools {
			if t := bytes.TrimSpace(tl); len(t) == 0 || t[0] != '{' {
				return r, fmt.Errorf(`"tools"[%d]: expected an object, got %s`, i, describe(tl))
			}
		}
	}
	var found []string
	for _, k := range []string{"prompt", "messages", "conversations"} {
		if _, ok := obj[k]; ok {
			found = append(found, k)
		}
	}
	switch len(found) {
	case 0:
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, fmt.Sprintf("%q", k))
		}
		sort.Strings(keys)
		return r, fmt.Errorf("expected %s; found keys: %s", expectedKeys(conv), orNone(strings.Join(keys, ", ")))
	case 1:
	default:
		return r, fmt.Errorf("has both %q and %q; expected exactly one of them", found[0], found[1])
	}

	var err error
	switch found[0] {
	case "prompt":
		if r.tools != nil {
			return r, fmt.Errorf(`"tools" needs "messages" or "conversations"; a raw "prompt" is not rendered through the chat template`)
		}
		if r.prompt, err = nonEmptyString(obj["prompt"], "prompt"); err != nil {
			return r, err
		}
		if conv {
			raw, ok := obj["response"]
			if !ok {
				return r, fmt.Errorf(`"prompt" needs a "response" in a conversation file (or use "messages" with an assistant turn)`)
			}
			if r.response, err = nonEmptyString(raw, "response"); err != nil {
				return r, err
			}
		}
		return r, nil
	case "messages":
		r.messages, err = parseMessages(obj["messages"], "messages", false)
	case "conversations":
		r.messages, err = parseMessages(obj["conversations"], "conversations", true)
	}
	if err != nil {
		return r, err
	}
	return r, finishConversation(&r, found[0], conv)
}

// finishConversation applies the prompt or conversation rules.
func finishConversation(r *record, key string, conv bool) error {
	if !conv {
		n := len(r.messages)
		for n > 0 && r.messages[n-1].Role == "assistant" {
			n--
		}
		r.messages = r.messages[:n]
	}
	users, assistants := 0, 0
	for i := range r.messages {
		switch r.messages[i].Role {
		case "user":
			users++
		case "assistant":
			assistants++
		}
	}
	if users == 0 {
		return fmt.Errorf("%q: the conversation has no user turn; expected at least one", key)
	}
	if conv && assistants == 0 {
		return fmt.Errorf("%q: the conversation has no assistant turn; a conversation file needs the answers (for prompts without answers, use drafter distill)", key)
	}
	return nil
}

func expectedKeys(conv bool) string {
	if conv {
		return `{"messages": [...]}, {"conversations": [...]} or {"prompt": "...", "response": "..."}`
	}
	return `{"prompt": "..."}, {"messages": [...]} or {"conversations": [...]}`
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func parseID(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf(`"id": %v`, err)
		}
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", fmt.Errorf(`"id": expected a string or a number, got %s`, describe(raw))
	}
	return n.String(), nil
}

func nonEmptyString(raw json.RawMessage, key string) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%q: expected a string, got %s", key, describe(raw))
	}
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("%q: empty; expected non-empty text", key)
	}
	return s, nil
}

// describe names the JSON type of raw for error messages.
func describe(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	if !json.Valid(raw) {
		return "text that is not valid JSON"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "a list"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// field is one key of a JSON object, in file order.
type field struct {
	key string
	raw json.RawMessage
}

// orderedObject decodes a JSON object keeping its key order.
func orderedObject(raw json.RawMessage) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("expected an object, got %s", describe(raw))
	}
	var out []field
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, field{key: kt.(string), raw: v})
	}
	return out, nil
}

// openAIRole maps an OpenAI message role to the template's role.
func openAIRole(role string) (string, bool) {
	switch role {
	case "system", "user", "assistant", "tool":
		return role, true
	case "developer":
		return "system", true
	}
	return "", false
}

// shareGPTRole maps a ShareGPT "from" value (any case) to a role.
func shareGPTRole(from string) (string, bool) {
	switch strings.ToLower(from) {
	case "human", "user":
		return "user", true
	case "gpt", "assistant", "chatgpt", "bard", "model", "function_call":
		return "assistant", true
	case "system":
		return "system", true
	case "tool", "function", "observation", "function_response", "ipython":
		return "tool", true
	}
	return "", false
}

// parseMessages parses an OpenAI "messages" list, or a ShareGPT
// "conversations" list when shareGPT is set (whose elements may also be
// OpenAI-style).
func parseMessages(raw json.RawMessage, key string, shareGPT bool) ([]chat.Message, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%q: expected a list of messages, got %s", key, describe(raw))
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%q: empty list; expected at least one user turn", key)
	}
	msgs := make([]chat.Message, len(items))
	for i, it := range items {
		fields, err := orderedObject(it)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %v", key, i, err)
		}
		isShareGPT := false
		if shareGPT {
			for _, f := range fields {
				if f.key == "from" {
					isShareGPT = true
				}
			}
		}
		if isShareGPT {
			err = parseShareGPTTurn(fields, &msgs[i])
		} else {
			err = parseOpenAIMessage(fields, &msgs[i])
		}
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %v", key, i, err)
		}
	}
	return msgs, nil
}

func parseShareGPTTurn(fields []field, m *chat.Message) error {
	var from string
	hasValue := false
	for _, f := range fields {
		switch f.key {
		case "from":
			if err := json.Unmarshal(f.raw, &from); err != nil {
				return fmt.Errorf(`"from": expected a string, got %s`, describe(f.raw))
			}
		case "value":
			if err := json.Unmarshal(f.raw, &m.Content); err != nil {
				return fmt.Errorf(`"value": expected a string, got %s`, describe(f.raw))
			}
			hasValue = true
		}
	}
	role, ok := shareGPTRole(from)
	if !ok {
		return fmt.Errorf(`unknown "from" %q; expected human, gpt, system or tool (or user, assistant, chatgpt, bard, model, function_call, function, observation, function_response, ipython)`, from)
	}
	if !hasValue {
		return fmt.Errorf(`missing "value"`)
	}
	m.Role = role
	return checkContent(m, false)
}

func parseOpenAIMessage(fields []field, m *chat.Message) error {
	hasRole, hasContent, nullContent := false, false, false
	for _, f := range fields {
		switch f.key {
		case "role":
			var role string
			if err := json.Unmarshal(f.raw, &role); err != nil {
				return fmt.Errorf(`"role": expected a string, got %s`, describe(f.raw))
			}
			r, ok := openAIRole(role)
			if !ok {
				return fmt.Errorf(`unknown role %q; expected system, user, assistant or tool`, role)
			}
			m.Role, hasRole = r, true
		case "content":
			hasContent = true
			s, isNull, err := parseContent(f.raw)
			if err != nil {
				return err
			}
			m.Content, nullContent = s, isNull
		case "name":
			if err := json.Unmarshal(f.raw, &m.Name); err != nil {
				return fmt.Errorf(`"name": expected a string, got %s`, describe(f.raw))
			}
		case "tool_call_id":
			if err := json.Unmarshal(f.raw, &m.ToolCallID); err != nil {
				return fmt.Errorf(`"tool_call_id": expected a string, got %s`, describe(f.raw))
			}
		case "tool_calls":
			calls, err := parseToolCalls(f.raw)
			if err != nil {
				return err
			}
			m.ToolCalls = calls
		default:
			m.Extra = append(m.Extra, chat.Field{Key: f.key, Value: append(json.RawMessage(nil), f.raw...)})
		}
	}
	if !hasRole {
		return fmt.Errorf(`missing "role"; expected {"role": ..., "content": ...}`)
	}
	if !hasContent && len(m.ToolCalls) == 0 {
		return fmt.Errorf(`missing "content"`)
	}
	if nullContent && len(m.ToolCalls) == 0 {
		return fmt.Errorf(`"content" is null; only assistant turns with "tool_calls" may omit it`)
	}
	return checkContent(m, len(m.ToolCalls) > 0)
}

// checkContent rejects user turns without text and assistant turns with
// neither text nor tool calls.
func checkContent(m *chat.Message, hasCalls bool) error {
	if hasCalls && m.Role != "assistant" {
		return fmt.Errorf(`"tool_calls" on a %s turn; only assistant turns make tool calls`, m.Role)
	}
	if (m.Role == "user" || m.Role == "assistant" && !hasCalls) && strings.TrimSpace(m.Content) == "" {
		return fmt.Errorf("%s turn with empty content", m.Role)
	}
	return nil
}

// parseContent reads a message content: a string, null, or a list of text
// parts (concatenated).
func parseContent(raw json.RawMessage) (s string, isNull bool, err error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case string(raw) == "null":
		return "", true, nil
	case len(raw) > 0 && raw[0] == '"':
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false, fmt.Errorf(`"content": %v`, err)
		}
		return s, false, nil
	case len(raw) > 0 && raw[0] == '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", false, fmt.Errorf(`"content": expected a string or a list of {"type": "text", "text": ...} parts: %v`, err)
		}
		var b strings.Builder
		for i, p := range parts {
			if p.Type != "text" || p.Text == nil {
				return "", false, fmt.Errorf(`"content"[%d]: only {"type": "text", "text": ...} parts are supported, got type %q`, i, p.Type)
			}
			b.WriteString(*p.Text)
		}
		return b.String(), false, nil
	}
	return "", false, fmt.Errorf(`"content": expected a string, got %s`, describe(raw))
}

func parseToolCalls(raw json.RawMessage) ([]chat.ToolCall, error) {
	var items []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function *struct {
			Name      *string         `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf(`"tool_calls": expected a list of {"type": "function", "function": {"name", "arguments"}}: %v`, err)
	}
	calls := make([]chat.ToolCall, len(items))
	for i, it := range items {
		if it.Function == nil || it.Function.Name == nil {
			return nil, fmt.Errorf(`"tool_calls"[%d]: expected "function": {"name": ..., "arguments": ...}`, i)
		}
		calls[i] = chat.ToolCall{ID: it.ID, Type: it.Type, Function: chat.ToolFunction{Name: *it.Function.Name, Arguments: it.Function.Arguments}}
	}
	return calls, nil
}
