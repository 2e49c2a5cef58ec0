package optim

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"

	"github.com/drafter-ai/drafter/pkg/finite"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// checkpointFormat names the file layout in the safetensors metadata.
const checkpointFormat = "drafter-train-checkpoint/1"

// checksumKey is the metadata key of the checkpoint's SHA-256 (see
// checkpointSum). Checkpoints written before it existed have none.
const checksumKey = "sha256"

// TrainState is what the training loop needs besides the optimiser to
// resume a run exactly where it stopped.
type TrainState struct {
	// RNG is the serialised random generator (for example rand.PCG.MarshalBinary).
	RNG []byte `json:"rng"`
	// Epoch, Cursor and Offset locate the data position: the epoch, the index of
	// the next sample in that epoch's order, and the first unread position in it.
	Epoch  int `json:"epoch"`
	Cursor int `json:"cursor"`
	Offset int `json:"offset"`
	// Args are the run's settings as JSON; Extra is the loop's own state as
	// JSON (the best evaluation so far, the patience counter, ...).
	Args  json.RawMessage `json:"args,omitempty"`
	Extra json.RawMessage `json:"extra,omitempty"`
	// Buffers are additional float32 tensors on the optimiser's device saved
	// by name (Grad is ignored), such as the best weights kept for early
	// stopping. LoadCheckpoint restores them in place: the caller
	// preallocates them with the saved names and sizes.
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
// is JSON under the metadata key "drafter_state", and the metadata key "sha256"
// holds the checksum LoadCheckpoint verifies (checkpointSum). The tensors are
// read from the optimiser's device (Read) into host buffers, each saved as a
// vector of its values.
func SaveCheckpoint(path string, opt *AdamW, st *TrainState) error {
	ts := make([]safetensors.Tensor, 0, 3*len(opt.Params)+len(st.Buffers))
	var buf []float32 // one host buffer for every read: F32Tensor copies it
	read := func(name string, t tensor.Tensor) safetensors.Tensor {
		if cap(buf) < t.Len() {
			buf = make([]float32, t.Len())
		}
		v := buf[:t.Len()]
		opt.dev.Read(v, t)
		return safetensors.F32Tensor(name, []int{len(v)}, v)
	}
	for i, p := range opt.Params {
		ts = append(ts, read("param/"+p.Name, p.Data), read("adam_m/"+p.Name, opt.M[i]), read("adam_v/"+p.Name, opt.V[i]))
	}
	for _, b := range st.Buffers {
		ts = append(ts, read("buffer/"+b.Name, b.Data))
	}
	meta, err := json.Marshal(checkpointMeta{Step: opt.StepCount, Adam: opt.Config, State: st})
	if err != nil {
		return fmt.Errorf("optim: checkpoint %s: encoding state: %w", path, err)
	}
	md := map[string]string{"format": checkpointFormat, "drafter_state": string(meta), "step": strconv.FormatInt(opt.StepCount, 10)}
	sum := newCheckpointSum(md)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	for _, t := range ts {
		sum.tensor(t.Name, t.DType, t.Shape, t.Data)
	}
	md[checksumKey] = sum.hex()
	if err := safetensors.WriteFile(path, ts, md); err != nil {
		return fmt.Errorf("optim: writing checkpoint: %w", err)
	}
	return nil
}

// LoadCheckpoint restores a checkpoint written by SaveCheckpoint into opt (its
// parameters' Data, moments and StepCount) and st (scalars, Args, Extra and the
// preallocated Buffers), writing the tensors to the optimiser's device
// (Write) from host buffers. The file must match the SHA-256 it was saved with
// (one written before checksums existed has none and is accepted) and every
// value must be finite; every parameter and buffer must be present with the
// same size, and the file must hold no parameter opt does not have; otherwise
// nothing is guaranteed restored and an error names the file and what is
// wrong.
func LoadCheckpoint(path string, opt *AdamW, st *TrainState) error {
	set, err := safetensors.Open(path)
	if err != nil {
		return fmt.Errorf("optim: checkpoint %s cannot be read (%w): %s", path, err, damagedAdvice)
	}
	defer set.Close()
	md := set.Metadata()
	if md["format"] != checkpointFormat {
		return fmt.Errorf("optim: %s is not a drafter training checkpoint (metadata format %q, want %q)", path, md["format"], checkpointFormat)
	}
	if err := verifyCheckpoint(path, set); err != nil {
		return err
	}
	var meta checkpointMeta
	meta.State = st
	bufs := st.Buffers
	if err := json.Unmarshal([]byte(md["drafter_state"]), &meta); err != nil {
		return fmt.Errorf("optim: checkpoint %s: decoding drafter_state metadata: %w", path, err)
	}
	st.Buffers = bufs
	want := make(map[string]bool, 3*len(opt.Params)+len(bufs))
	var buf []float32
	load := func(name string, dst tensor.Tensor) error {
		want[name] = true
		info, ok := set.Info(name)
		if !ok {
			return fmt.Errorf("optim: checkpoint %s has no tensor %q (was it written by a run with other arguments?)", path, name)
		}
		if info.NumElements() != dst.Len() {
			return fmt.Errorf("optim: checkpoint %s: tensor %q has %d values, this run expects %d", path, name, info.NumElements(), dst.Len())
		}
		if info.DType != safetensors.F32 {
			return fmt.Errorf("optim: checkpoint %s: tensor %q is %s, want F32", path, name, info.DType)
		}
		if cap(buf) < dst.Len() {
			buf = make([]float32, dst.Len())
		}
		if err := set.Float32Into(name, buf[:dst.Len()]); err != nil {
			return err
		}
		opt.dev.Write(dst, buf[:dst.Len()])
		return nil
	}
	for i, p := range opt.Params {
		for _, e := range []struct {
			prefix string
			dst    tensor.Tensor
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

// damagedAdvice says what to do about a checkpoint that cannot be trusted.
const damagedAdvice = "delete it to start the run over, or restore it from a copy"

// verifyCheckpoint recomputes a checkpoint's SHA-256 and compares it with the
// recorded one (when there is one), and refuses a NaN or infinite value in
// any F32 tensor: one pass over the tensors' bytes.
func verifyCheckpoint(path string, set *safetensors.Set) error {
	md := set.Metadata()
	sum := newCheckpointSum(md)
	names := slices.Sorted(slices.Values(set.Names()))
	badTensor, badAt := "", -1
	for _, n := range names {
		raw, info, err := set.Raw(n)
		if err != nil {
			return fmt.Errorf("optim: checkpoint %s: %w", path, err)
		}
		sum.tensor(n, info.DType, info.Shape, raw)
		if info.DType == safetensors.F32 && badAt < 0 {
			if i := finite.F32(raw); i >= 0 {
				badTensor, badAt = n, i
			}
		}
	}
	want, checked := md[checksumKey]
	if checked && sum.hex() != want {
		return fmt.Errorf("optim: checkpoint %s is damaged: its content does not match the SHA-256 it was saved with (%s, now %s): %s",
			path, want, sum.hex(), damagedAdvice)
	}
	if badAt >= 0 {
		raw, _, _ := set.Raw(badTensor)
		return fmt.Errorf("optim: checkpoint %s: tensor %q element %d is %s: the run diverged before it was saved, or the file was damaged; "+
			"delete it to start the run over (with a lower --lr if it diverged), or restore it from a copy",
			path, badTensor, badAt, finite.Kind32(binary.LittleEndian.Uint32(raw[4*badAt:])))
	}
	return nil
}

// CheckpointNote returns a note to show before resuming from the checkpoint
// at path when it was written by a drafter that recorded no checksum (it is
// then only checked for finite values), and "" otherwise, also when the file
// cannot be read (LoadCheckpoint reports that).
func CheckpointNote(path string) string {
	set, err := safetensors.Open(path)
	if err != nil {
		return ""
	}
	defer set.Close()
	if _, ok := set.Metadata()[checksumKey]; ok || set.Metadata()["format"] != checkpointFormat {
		return ""
	}
	return fmt.Sprintf("note: %s was written by an older drafter and has no checksum: resuming from it after checking only that its values are finite", path)
}

// checkpointSum hashes what a checkpoint holds, in a defined order: every
// metadata entry but the checksum's own (sorted by key), then every tensor
// (sorted by name: name, dtype, shape, bytes). Every field is preceded by its
// length, so no two different checkpoints hash the same field stream.
type checkpointSum struct {
	h   hash.Hash
	buf [8]byte
}

func newCheckpointSum(md map[string]string) *checkpointSum {
	s := &checkpointSum{h: sha256.New()}
	s.field([]byte(checkpointFormat))
	for _, k := range slices.Sorted(maps.Keys(md)) {
		if k != checksumKey {
			s.field([]byte(k))
			s.field([]byte(md[k]))
		}
	}
	return s
}

func (s *checkpointSum) tensor(name string, dt safetensors.DType, shape []int, data []byte) {
	s.field([]byte(name))
	s.field([]byte(dt))
	s.field([]byte(safetensors.ShapeString(shape)))
	s.field(data)
}

func (s *checkpointSum) field(b []byte) {
	binary.LittleEndian.PutUint64(s.buf[:], uint64(len(b)))
	s.h.Write(s.buf[:])
	s.h.Write(b)
}

func (s *checkpointSum) hex() string { return hex.EncodeToString(s.h.Sum(nil)) }

// Resume restores a run from the checkpoint at path, if there is one, for a
// run started with its resume option: it loads the parameters, moments and
// st, and decodes st.Extra into extra. It reports whether a checkpoint was
// found; a missing file starts the run afresh. (The caller checks the run's
// settings against the first run's: see train/loop.)
func Resume(path string, opt *AdamW, st *TrainState, extra any) (bool, error) {
	if _, err := os.Stat(path); err != nil {
		if os.IsNotExist(err) {
			return false, nil
		}
		return false, err
	}
	if err := LoadCheckpoint(path, opt, st); err != nil {
		return false, err
	}
	if err := json.Unmarshal(st.Extra, extra); err != nil {
		return false, fmt.Errorf("checkpoint %s: decoding trainer state: %w", path, err)
	}
	return true, nil
}
