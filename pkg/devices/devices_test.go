package devices

import (
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Spec{
		"": {Kind: Auto}, "auto": {Kind: Auto}, "CPU": {Kind: CPU}, "cuda": {Kind: CUDA},
		"gpu": {Kind: CUDA}, "cuda:0": {Kind: CUDA}, " cuda:3 ": {Kind: CUDA, Ordinal: 3},
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"tpu", "cuda:", "cuda:-1", "cuda:x", "cpu:0", "cuda0"} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), "want auto, cpu, cuda or cuda:N") {
			t.Errorf("Parse(%q): %v, want an error naming the choices", in, err)
		}
	}
	if s := (Spec{Kind: CUDA, Ordinal: 2}).String(); s != "cuda:2" {
		t.Errorf("String = %q", s)
	}
}

// TestOpenFallsBack: with no driver, auto opens the CPU device and says why
// in one line; cuda fails with the same reason; cpu opens the CPU silently.
func TestOpenFallsBack(t *testing.T) {
	t.Setenv("DRAFTER_LIBCUDA", t.TempDir()+"/libcuda.so.1")
	be := cpu.PureGo()
	o, err := Open(Spec{Kind: Auto}, be)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := o.Device.(*cpu.Device); !ok || !strings.HasSuffix(o.Note, ": using the CPU (go)") || strings.Contains(o.Note, "\n") {
		t.Errorf("auto without a driver: %T, note %q", o.Device, o.Note)
	}
	if err := o.Close(); err != nil {
		t.Error(err)
	}
	if _, err := Open(Spec{Kind: CUDA}, be); err == nil || !strings.HasPrefix(err.Error(), "--device cuda: ") {
		t.Errorf("cuda without a driver: %v", err)
	}
	if o, err := Open(Spec{Kind: CPU}, be); err != nil || o.Note != "" || o.Device.Name() != "cpu/go" {
		t.Errorf("cpu: %v, %+v", err, o)
	}
	l := List(be)
	if len(l) != 2 || !l[0].Usable || l[1].Usable || l[1].Reason == "" {
		t.Errorf("List without a driver: %+v", l)
	}
}
