package optim

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// checkpointFormat names the file layout in the safetensors metadata.
const checkpointFormat = "drafter-train-checkpoint/1"

// TrainState is what a trainer needs besides the optimiser to resume a run
// exactly where it stopped.
type TrainState struct {
	// RNG is the serialised random generator (for example rand.PCG.MarshalBinary).
	RNG []byte `json:"rng"`
	// Epoch, Cursor and Offset locate the data position: the epoch, the index of
	// the next sample in that epoch's order, and the first unread position in it.
	Epoch  int `json:"epoch"`
	Cursor int `json:"cursor"`
	Offset int `json:"offset"`
	// Args are the run's arguments as JSON; Extra is any trainer-specific JSON
	// (best loss so far, patience counter, ...).
	Args  json.RawMessage `json:"args,omitempty"`
	Extra json.RawMessage `json:"extra,omitempty"`
	// Buffers are additional float32 tensors saved by name (Grad is ignored),
	// such as the best weights kept for early stopping. LoadCheckpoint restores
	// them in place: the caller preallocates them with the saved names and sizes.
	Buffers []Param `json:"-"`
}

type checkpointMeta struct {
	Step  int64       `json:"step"`
	Adam  AdamWConfig `json:"adamw"`
	State *TrainState `json:"state"`
}

// SaveCheckpoint writes the parameters, the AdamW moments and step, and st into
// one safetensors file at path, atomically (temporary file, fsync, rename): a
// crash leaves either the previous checkpoint or the new one. Tensors are named
// param/<name>, adam_m/<name>, adam_v/<name> and buffer/<name>; the scalar state
// is JSON under the metadata key "drafter_state".
func SaveCheckpoint(path string, opt *AdamW, st *TrainState) error {
	ts := make([]safetensors.Tensor, 0, 3*len(opt.Params)+len(st.Buffers))
	for i, p := range opt.Params {
		shape := []int{len(p.Data)}
		ts = append(ts,
			safetensors.F32Tensor("param/"+p.Name, shape, p.Data),
			safetensors.F32Tensor("adam_m/"+p.Name, shape, opt.M[i]),
			safetensors.F32Tensor("adam_v/"+p.Name, shape, opt.V[i]))
	}
	for _, b := range st.Buffers {
		ts = append(ts, safetensors.F32Tensor("buffer/"+b.Name, []int{len(b.Data)}, b.Data))
	}
	meta, err := json.Marshal(checkpointMeta{Step: opt.StepCount, Adam: opt.Config, State: st})
	if err != nil {
		return fmt.Errorf("optim: checkpoint %s: encoding state: %w", path, err)
	}
	md := map[string]string{"format": checkpointFormat, "drafter_state": string(meta), "step": strconv.FormatInt(opt.StepCount, 10)}
	if err := safetensors.WriteFile(path, ts, md); err != nil {
		return fmt.Errorf("optim: writing checkpoint: %w", err)
	}
	return nil
}

// LoadCheckpoint restores a checkpoint written by SaveCheckpoint into opt (its
// parameters' Data, moments and StepCount) and st (scalars, Args, Extra and the
// preallocated Buffers). Every parameter and buffer must be present with the
// same size, and the file must hold no parameter opt does not have; otherwise
// nothing is guaranteed restored and an error names the mismatch.
func LoadCheckpoint(path string, opt *AdamW, st *TrainState) error {
	set, err := safetensors.Open(path)
	if err != nil {
		return fmt.Errorf("optim: opening checkpoint: %w", err)
	}
	defer set.Close()
	md := set.Metadata()
	if md["format"] != checkpointFormat {
		return fmt.Errorf("optim: %s is not a drafter training checkpoint (metadata format %q, want %q)", path, md["format"], checkpointFormat)
	}
	var meta checkpointMeta
	meta.State = st
	bufs := st.Buffers
	if err := json.Unmarshal([]byte(md["drafter_state"]), &meta); err != nil {
		return fmt.Errorf("optim: checkpoint %s: decoding drafter_state metadata: %w", path, err)
	}
	st.Buffers = bufs
	want := make(map[string]bool, 3*len(opt.Params)+len(bufs))
	load := func(name string, dst []float32) error {
		want[name] = true
		info, ok := set.Info(name)
		if !ok {
			return fmt.Errorf("optim: checkpoint %s has no tensor %q (was it written by a run with other arguments?)", path, name)
		}
		if info.NumElements() != len(dst) {
			return fmt.Errorf("optim: checkpoint %s: tensor %q has %d values, this run expects %d", path, name, info.NumElements(), len(dst))
		}
		if info.DType != safetensors.F32 {
			return fmt.Errorf("optim: checkpoint %s: tensor %q is %s, want F32", path, name, info.DType)
		}
		return set.Float32Into(name, dst)
	}
	for i, p := range opt.Params {
		for _, e := range []struct {
			prefix string
			dst    []float32
		}{{"param/", p.Data}, {"adam_m/", opt.M[i]}, {"adam_v/", opt.V[i]}} {
			if err := load(e.prefix+p.Name, e.dst); err != nil {
				return err
			}
		}
	}
	for _, b := range bufs {
		if err := load("buffer/"+b.Name, b.Data); err != nil {
			return err
		}
	}
	for _, n := range set.Names() {
		if !want[n] {
			return fmt.Errorf("optim: checkpoint %s holds tensor %q that this run does not have", path, n)
		}
	}
	opt.StepCount = meta.Step
	return nil
}

// Resume restores a run from the checkpoint at path, if there is one, for a
// trainer started with its resume option: it loads the parameters, moments and
// st, checks the saved arguments with sameArgs (which explains any difference),
// and decodes the trainer's own state from st.Extra into extra. It reports
// whether a checkpoint was found; a missing file starts the run afresh.
func Resume(path string, opt *AdamW, st *TrainState, sameArgs func(saved json.RawMessage) error, extra any) (bool, error) {
	if _, err := os.Stat(path); err != nil {
		if os.IsNotExist(err) {
			return false, nil
		}
		return false, err
	}
	if err := LoadCheckpoint(path, opt, st); err != nil {
		return false, err
	}
	if err := sameArgs(st.Args); err != nil {
		return false, fmt.Errorf("cannot resume from %s: %w", path, err)
	}
	if err := json.Unmarshal(st.Extra, extra); err != nil {
		return false, fmt.Errorf("checkpoint %s: decoding trainer state: %w", path, err)
	}
	return true, nil
}
