package dspark

import (
	"errors"
	"reflect"
	"testing"

	"github.com/drafter-ai/drafter/train/loop"
)

// flagSet records declarations like pflag: the pointer takes the default.
type flagSet struct{ names map[string]bool }

func (f *flagSet) IntVar(p *int, name string, v int, _ string) { *p = v; f.names[name] = true }
func (f *flagSet) Float64Var(p *float64, name string, v float64, _ string) {
	*p = v
	f.names[name] = true
}
func (f *flagSet) BoolVar(p *bool, name string, v bool, _ string)       { *p = v; f.names[name] = true }
func (f *flagSet) StringVar(p *string, name string, v string, _ string) { *p = v; f.names[name] = true }
func (f *flagSet) Uint64Var(p *uint64, name string, v uint64, _ string) { *p = v; f.names[name] = true }

// With no flag given the command trains DefaultOptions (the export format
// spelled out), and a bad --layers is a *loop.FlagError.
func TestCommandDefaults(t *testing.T) {
	fs := &flagSet{names: map[string]bool{}}
	build := Command{}.Flags(fs)
	m, err := build(func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultOptions()
	want.Format = "deepspec"
	if got := m.(Method).Options; !reflect.DeepEqual(got, want) {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	for _, n := range []string{"block-size", "markov-rank", "confidence-head", "confidence-with-markov", "ce-weight", "l1-weight", "confidence-weight", "gamma", "anchors", "layers", "lr", "epochs"} {
		if !fs.names[n] {
			t.Errorf("no --%s flag", n)
		}
	}
	fs = &flagSet{names: map[string]bool{}}
	build = Command{}.Flags(fs)
	_, err = build(func(n string) bool { return n == "layers" })
	var fe *loop.FlagError
	if !errors.As(err, &fe) || fe.Flag != "layers" {
		t.Errorf("empty --layers: %v, want a FlagError on layers", err)
	}
}
