package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/drafter-ai/drafter/pkg/chat/internal/jinja"
)

// messageValue converts a message to an ordered dict: role, content, then
// name, tool_calls and tool_call_id when set, then the extra fields.
func messageValue(m *Message) (jinja.Value, error) {
	v := jinja.NewDict()
	d := v.AsDict()
	d.Set("role", jinja.NewString(m.Role))
	d.Set("content", jinja.NewString(m.Content))
	if m.Name != "" {
		d.Set("name", jinja.NewString(m.Name))
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, len(m.ToolCalls))
		for i := range m.ToolCalls {
			c, err := toolCallValue(&m.ToolCalls[i])
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("tool_calls[%d]: %w", i, err)
			}
			calls[i] = c
		}
		d.Set("tool_calls", jinja.NewList(calls))
	}
	if m.ToolCallID != "" {
		d.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	for _, f := range m.Extra {
		val, err := decodeJSON(f.Value)
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("field %q: %w", f.Key, err)
		}
		d.Set(f.Key, val)
	}
	return v, nil
}

func toolCallValue(c *ToolCall) (jinja.Value, error) {
	v := jinja.NewDict()
	d := v.AsDict()
	if c.ID != "" {
		d.Set("id", jinja.NewString(c.ID))
	}
	if c.Type != "" {
		d.Set("type", jinja.NewString(c.Type))
	}
	fv := jinja.NewDict()
	f := fv.AsDict()
	f.Set("name", jinja.NewString(c.Function.Name))
	args := jinja.NewDict()
	if len(c.Function.Arguments) > 0 {
		a, err := decodeJSON(c.Function.Arguments)
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("function.arguments: %w", err)
		}
		args = a
	}
	f.Set("arguments", args)
	d.Set("function", fv)
	return v, nil
}

// toValue converts a tool definition or variable to a template value; raw
// JSON keeps its key order.
func toValue(x any) (jinja.Value, error) {
	switch v := x.(type) {
	case jinja.Value:
		return v, nil
	case json.RawMessage:
		return decodeJSON(v)
	case []byte:
		return decodeJSON(v)
	}
	val := jinja.FromGoValue(x)
	if val.IsUndefined() {
		return val, fmt.Errorf("unsupported Go type %T", x)
	}
	return val, nil
}

// decodeJSON decodes one JSON value into a template value, keeping object
// key order and the integer/float distinction.
func decodeJSON(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return jinja.Undefined(), fmt.Errorf("invalid JSON: trailing data after value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := jinja.NewDict()
			d := v.AsDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), fmt.Errorf("object key is not a string")
				}
				val, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.Set(key, val)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return v, nil
		case '[':
			var items []jinja.Value
			for dec.More() {
				val, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, val)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		}
		return jinja.Undefined(), fmt.Errorf("unexpected %v", t)
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return jinja.FromGoValue(t), nil
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected token %v", tok)
}
