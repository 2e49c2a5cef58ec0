package exportcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// configFile is the config every layout has (Hugging Face's name).
const configFile = "config.json"

// object is a JSON object as an engine reads it: Python's dict, where a
// key is present or absent and a value has a JSON type.
type object map[string]any

// readConfig reads a JSON object file.
func readConfig(path string) (object, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("exportcheck: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var o object
	if err := d.Decode(&o); err != nil {
		return nil, fmt.Errorf("exportcheck: %s: %w", path, err)
	}
	if o == nil {
		return nil, fmt.Errorf("exportcheck: %s: not a JSON object", path)
	}
	return o, nil
}

// has reports whether key is present and not null: Python's
// dict.get(key) is not None, which is how the engines test for a key.
func (o object) has(key string) bool { return o != nil && o[key] != nil }

// str returns key's string value, "" when absent or not a string.
func (o object) str(key string) string {
	s, _ := o[key].(string)
	return s
}

// strs returns key's list of strings (non-strings skipped).
func (o object) strs(key string) []string {
	l, _ := o[key].([]any)
	var out []string
	for _, v := range l {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// obj returns key's object value, nil when absent or not an object.
func (o object) obj(key string) object {
	m, _ := o[key].(map[string]any)
	return object(m)
}

// integer converts a JSON number to an int, false unless it is integral.
func integer(v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	if i, err := n.Int64(); err == nil {
		return int(i), true
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int(f), true
}

// num returns key's number as a float64, false when absent or not a number.
func (o object) num(key string) (float64, bool) {
	n, ok := o[key].(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// ints returns key's list of integers; ok is false when the value is not a
// list of integers.
func (o object) ints(key string) (ids []int, ok bool) {
	l, isList := o[key].([]any)
	if !isList {
		return nil, false
	}
	for _, v := range l {
		i, isInt := integer(v)
		if !isInt {
			return nil, false
		}
		ids = append(ids, i)
	}
	return ids, true
}

// truthy is Python's bool(v) for a JSON value, which is how the engines
// read their boolean switches (getattr(config, key, False)).
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case json.Number:
		f, err := x.Float64()
		return err != nil || f != 0
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// provenance is what drafter.json records that the checks compare with.
type provenance struct {
	path string
	o    object
}

// readProvenance finds drafter.json in dir or its parent (drafter train
// writes it at the top of its output folder, beside the export folders);
// nil when there is none.
func readProvenance(dir string) (*provenance, error) {
	for _, d := range []string{dir, filepath.Dir(dir)} {
		p := filepath.Join(d, "drafter.json")
		if !fileExists(p) {
			continue
		}
		o, err := readConfig(p)
		if err != nil {
			return nil, err
		}
		return &provenance{path: p, o: o}, nil
	}
	return nil, nil
}

// flag returns a boolean drafter.json records (top level or in its
// "norms" block), with ok false when it records none.
func (p *provenance) flag(key string) (v, ok bool) {
	if p == nil {
		return false, false
	}
	for _, o := range []object{p.o, p.o.obj("norms")} {
		if b, isBool := o[key].(bool); isBool {
			return b, true
		}
	}
	return false, false
}

// targetLayers returns the target's num_hidden_layers when drafter.json
// records it, 0 when not.
func (p *provenance) targetLayers() int {
	if p == nil {
		return 0
	}
	for _, k := range []string{"target_num_hidden_layers", "num_target_layers"} {
		if n, ok := integer(p.o[k]); ok && n > 0 {
			return n
		}
	}
	if t := p.o.obj("target"); t != nil {
		if n, ok := integer(t["num_hidden_layers"]); ok && n > 0 {
			return n
		}
	}
	return 0
}

// tensorKind is what an engine loads a tensor as.
type tensorKind int

const (
	floatTensor tensorKind = iota
	intTensor
	boolTensor
)

func (k tensorKind) String() string {
	return [...]string{"a float type (F32, F16 or BF16)", "an integer type (I64 or I32)", "BOOL"}[k]
}

func (k tensorKind) accepts(d safetensors.DType) bool {
	switch k {
	case floatTensor:
		return d.IsFloat()
	case intTensor:
		return d == safetensors.I64 || d == safetensors.I32
	}
	return d == safetensors.BOOL
}

// want is a tensor an engine builds a parameter for from the config.
type want struct {
	shape []int
	kind  tensorKind
	// optional: the engine loads it when present and does without it.
	optional bool
	// why names the config keys the parameter's existence and shape come
	// from, for messages.
	why string
}

// weights is an export's safetensors header, as the checks need it.
type weights struct {
	file  string
	infos map[string]safetensors.Info
	set   *safetensors.Set
}

// openWeights opens a weights file (or a folder's model.safetensors or
// sharded index).
func openWeights(path string, dir bool) (*weights, error) {
	var set *safetensors.Set
	var err error
	if dir {
		set, err = safetensors.OpenDir(path)
	} else {
		set, err = safetensors.Open(path)
	}
	if err != nil {
		return nil, err
	}
	w := &weights{set: set, infos: map[string]safetensors.Info{}}
	if fs := set.Files(); len(fs) == 1 {
		w.file = fs[0]
	} else {
		w.file = path
	}
	for _, n := range set.Names() {
		w.infos[n], _ = set.Info(n)
	}
	return w, nil
}

func (w *weights) close() {
	if w != nil && w.set != nil {
		w.set.Close()
	}
}

// sortedNames returns the tensor names in order.
func (w *weights) sortedNames() []string {
	out := make([]string, 0, len(w.infos))
	for n := range w.infos {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// compare checks the tensors an engine builds (wants, by the name it looks
// up: rename maps a file name to it, "" for one the engine drops before
// looking) against the file's, for the engines es: every wanted tensor
// present with its shape and a type the engine loads, and every tensor of
// the file one the engine loads. unused says what the engine does with a
// tensor it has no parameter for (refuses the file, or skips it silently),
// missingMsg what it does when a wanted one is absent.
func (c *checker) compare(es []Engine, w *weights, wants map[string]want, rename func(string) string, unused func(name string) string, missingMsg string) {
	seen := map[string]bool{}
	for _, name := range w.sortedNames() {
		info := w.infos[name]
		key := name
		if rename != nil {
			key = rename(name)
		}
		if key == "" {
			continue
		}
		wt, ok := wants[key]
		if !ok {
			c.add(Error, es, w.file, name, unused(name))
			continue
		}
		seen[key] = true
		if !slices.Equal(info.Shape, wt.shape) {
			c.add(Error, es, w.file, name, fmt.Sprintf("shape %s, but the engine builds %s from %s", safetensors.ShapeString(info.Shape), safetensors.ShapeString(wt.shape), wt.why))
		}
		if !wt.kind.accepts(info.DType) {
			c.add(Error, es, w.file, name, fmt.Sprintf("type %s, want %s", info.DType, wt.kind))
		}
	}
	var missing []string
	for k, wt := range wants {
		if !seen[k] && !wt.optional {
			missing = append(missing, k)
		}
	}
	slices.Sort(missing)
	for _, k := range missing {
		c.add(Error, es, w.file, k, fmt.Sprintf("missing: the engine builds this parameter from %s, and %s", wants[k].why, missingMsg))
	}
}
