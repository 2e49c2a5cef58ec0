package checkpoint

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestFieldErrorsShowTheType: a value of the wrong JSON type is shown with
// its type, so "64" the string does not read as 64 the number.
func TestFieldErrorsShowTheType(t *testing.T) {
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(`{"hidden_size": "64", "eps": "1e-5", "tie": "true", "name": 5, "eos": [1, "2"], "frac": 64.5, "obj": {}}`))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	f := fields{path: "config.json", m: m}
	_, e1 := f.int("hidden_size", 0, true)
	_, e2 := f.float("eps", 0)
	_, e3 := f.bool("tie", false)
	_, e4 := f.string("name", "")
	_, e5 := f.ids("eos")
	_, e6 := f.int("frac", 0, true)
	_, e7 := f.int("obj", 0, true)
	for _, c := range []struct {
		err  error
		want string
	}{
		{e1, `config.json: field "hidden_size": expected an integer, got the string "64"`},
		{e2, `field "eps": expected a number, got the string "1e-5"`},
		{e3, `field "tie": expected true or false, got the string "true"`},
		{e4, `field "name": expected a string, got the number 5`},
		{e5, `field "eos": expected a non-negative token id or a list of them, got the list [1,"2"]`},
		{e6, `field "frac": expected an integer, got the number 64.5`},
		{e7, `field "obj": expected an integer, got an object`},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("got %v, want %q", c.err, c.want)
		}
	}
}
