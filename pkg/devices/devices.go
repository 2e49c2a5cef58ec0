// Package devices chooses a run's compute device from what the user asked
// for (--device auto|cpu|cuda[:N]) and what the machine has: the CPU device
// on a BLAS backend, or a CUDA GPU through the driver and cuBLAS loaded at
// run time (pkg/tensor/cuda). A run opens one device and hands it down; its
// model, drafts and trainers compute on siblings of it.
package devices

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/pkg/tensor/cuda"
)

// Kind is a device family a user can ask for.
type Kind string

// The kinds of Spec.
const (
	Auto Kind = "auto" // CUDA when usable, else the CPU, saying why
	CPU  Kind = "cpu"
	CUDA Kind = "cuda"
)

// Spec is a parsed --device value.
type Spec struct {
	Kind Kind
	// Ordinal is the CUDA device's index (cuda:N; 0 for cuda and auto).
	Ordinal int
}

// String returns the spec as the flag spells it.
func (s Spec) String() string {
	if s.Kind == CUDA && s.Ordinal != 0 {
		return "cuda:" + strconv.Itoa(s.Ordinal)
	}
	return string(s.Kind)
}

// Parse reads a --device value: auto, cpu, cuda or cuda:N.
func Parse(v string) (Spec, error) {
	v = strings.TrimSpace(strings.ToLower(v))
	switch v {
	case "", "auto":
		return Spec{Kind: Auto}, nil
	case "cpu":
		return Spec{Kind: CPU}, nil
	case "cuda", "gpu":
		return Spec{Kind: CUDA}, nil
	}
	if n, ok := strings.CutPrefix(v, "cuda:"); ok {
		i, err := strconv.Atoi(n)
		if err == nil && i >= 0 {
			return Spec{Kind: CUDA, Ordinal: i}, nil
		}
	}
	return Spec{}, fmt.Errorf("--device %q: want auto, cpu, cuda or cuda:N (N a GPU's index, from 0)", v)
}

// Opened is the device a run computes on.
type Opened struct {
	tensor.Device
	// Note says, in one line, which device runs and, for auto on the CPU,
	// why CUDA does not ("cuda: libcuda.so.1: cannot open ...: using the
	// CPU"); empty when the user named the device.
	Note string
	// close releases the device's memory and context (nil for the CPU).
	close func() error
}

// RunGraph runs pass as a graph where the device runs graphs
// (tensor.Grapher: the CUDA device), else plainly: an Opened wraps the
// device, so it passes the capability on.
func (o *Opened) RunGraph(key tensor.GraphKey, pass func()) bool {
	if g, ok := o.Device.(tensor.Grapher); ok {
		return g.RunGraph(key, pass)
	}
	pass()
	return false
}

// Close releases the device; the Opened must not be used afterwards.
func (o *Opened) Close() error {
	if o.close == nil {
		return nil
	}
	err := o.close()
	o.close = nil
	return err
}

// Open opens the device spec names; the CPU device computes its products
// on be (cpu.DefaultBackend() when nil). Auto falls back to the CPU when CUDA cannot
// be used, with the reason in Note; cuda fails with that reason instead.
func Open(spec Spec, be cpu.Backend) (*Opened, error) {
	if be == nil {
		be = cpu.DefaultBackend()
	}
	cpu := func(note string) *Opened { return &Opened{Device: cpu.New(be), Note: note} }
	switch spec.Kind {
	case CPU:
		return cpu(""), nil
	case CUDA, Auto:
		d, err := cuda.Open(spec.Ordinal)
		if err != nil {
			if spec.Kind == Auto {
				return cpu(fmt.Sprintf("device: %v: using the CPU (%s)", err, be.Name())), nil
			}
			return nil, fmt.Errorf("--device %s: %w", spec, err)
		}
		note := ""
		if spec.Kind == Auto {
			note = "device: using " + d.Name()
		}
		if off := d.GraphsOff(); off != "" && !strings.HasPrefix(off, "DRAFTER_CUDA_GRAPHS=") {
			// Said once: the device runs, without CUDA graphs.
			note = strings.TrimPrefix(note+"; ", "; ") + "device: no CUDA graphs (" + off + "): decode steps launch op by op"
		}
		return &Opened{Device: d, Note: note, close: d.Close}, nil
	}
	return nil, fmt.Errorf("devices: unknown kind %q", spec.Kind)
}

// Found is one device the machine offers, as List reports it.
type Found struct {
	Spec Spec
	// Name describes the device ("cpu/openblas", "cuda:0 NVIDIA H100 ...").
	Name string
	// Usable is false, with Reason, where drafter cannot compute on it.
	Usable bool
	Reason string
}

// List reports the CPU device and every CUDA device the driver shows, or
// the reason none can be used.
func List(be cpu.Backend) []Found {
	if be == nil {
		be = cpu.DefaultBackend()
	}
	out := []Found{{Spec: Spec{Kind: CPU}, Name: "cpu/" + be.Name(), Usable: true}}
	infos, err := cuda.ProbeAll()
	if err != nil {
		return append(out, Found{Spec: Spec{Kind: CUDA}, Name: "cuda", Reason: err.Error()})
	}
	for i, in := range infos {
		f := Found{Spec: Spec{Kind: CUDA, Ordinal: i}, Name: in.String(), Usable: in.Err == nil}
		if in.Err != nil {
			f.Reason = in.Err.Error()
		}
		out = append(out, f)
	}
	return out
}

// WithProducts returns a sibling of the opened device whose training
// products (MatMul) compute with p, or the error saying the device cannot
// (tensor.WithProducts): a run's device stays usable through its Opened.
func (o *Opened) WithProducts(p tensor.Products) (tensor.Device, error) {
	return tensor.WithProducts(o.Device, p)
}
