package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
)

// fields reads typed values out of a decoded JSON object and names the file and field in
// every error.
type fields struct {
	path string
	m    map[string]any
}

// readObject decodes a JSON object file, keeping numbers exact; a missing
// file is an error saying so.
func readObject(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint: %s is missing", path)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return decodeObject(path, b)
}

// decodeObject decodes the JSON object b, read from path (named in
// errors), keeping numbers exact.
func decodeObject(path string, b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: invalid JSON: %w", path, err)
	}
	if m == nil {
		return nil, fmt.Errorf("checkpoint: %s: expected a JSON object", path)
	}
	return m, nil
}

func (f fields) errorf(field, format string, a ...any) error {
	return fmt.Errorf("checkpoint: %s: field %q: "+format, append([]any{f.path, field}, a...)...)
}

// present reports whether key is set to a non-null value.
func (f fields) present(key string) bool {
	v, ok := f.m[key]
	return ok && v != nil
}

// toInt converts a JSON number holding an integer (64.0 is accepted, 64.5 is not).
func toInt(v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	if i, err := n.Int64(); err == nil {
		return int(i), true
	}
	x, err := n.Float64()
	if err != nil || x != math.Trunc(x) || math.Abs(x) > 1<<53 {
		return 0, false
	}
	return int(x), true
}

// int returns an integer field, def when absent or null, or an error when required and
// absent or of another type.
func (f fields) int(key string, def int, required bool) (int, error) {
	if !f.present(key) {
		if required {
			return 0, f.errorf(key, "missing (an integer is required)")
		}
		return def, nil
	}
	i, ok := toInt(f.m[key])
	if !ok {
		return 0, f.errorf(key, "expected an integer, got %s", describe(f.m[key]))
	}
	return i, nil
}

// float returns a number field or def when absent or null.
func (f fields) float(key string, def float64) (float64, error) {
	if !f.present(key) {
		return def, nil
	}
	n, ok := f.m[key].(json.Number)
	if !ok {
		return 0, f.errorf(key, "expected a number, got %s", describe(f.m[key]))
	}
	x, err := n.Float64()
	if err != nil {
		return 0, f.errorf(key, "expected a number within float64's range, got %s", n)
	}
	return x, nil
}

// bool returns a boolean field or def when absent or null.
func (f fields) bool(key string, def bool) (bool, error) {
	if !f.present(key) {
		return def, nil
	}
	b, ok := f.m[key].(bool)
	if !ok {
		return false, f.errorf(key, "expected true or false, got %s", describe(f.m[key]))
	}
	return b, nil
}

// string returns a string field or def when absent or null.
func (f fields) string(key, def string) (string, error) {
	if !f.present(key) {
		return def, nil
	}
	s, ok := f.m[key].(string)
	if !ok {
		return "", f.errorf(key, "expected a string, got %s", describe(f.m[key]))
	}
	return s, nil
}

// ids returns a token-id field that may be an integer, a list of integers or null
// (nil result). Ids must be non-negative.
func (f fields) ids(key string) ([]int, error) {
	if !f.present(key) {
		return nil, nil
	}
	var list []any
	switch v := f.m[key].(type) {
	case []any:
		list = v
	default:
		list = []any{v}
	}
	out := make([]int, 0, len(list))
	for _, v := range list {
		i, ok := toInt(v)
		if !ok || i < 0 {
			return nil, f.errorf(key, "expected a non-negative token id or a list of them, got %s", describe(f.m[key]))
		}
		out = append(out, i)
	}
	return out, nil
}

// describe shows a decoded JSON value with its type, so that a string "64"
// does not read as the number 64 in an error.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", x)
	case json.Number:
		return "the number " + x.String()
	case bool:
		return fmt.Sprint(x)
	case nil:
		return "null"
	case []any:
		b, _ := json.Marshal(x)
		return "the list " + string(b)
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%v", v)
}
