package optim

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// savedCheckpoint saves a checkpoint of a few steps and returns its path.
func savedCheckpoint(t *testing.T) (string, *AdamW) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "checkpoint.safetensors")
	o, r := newTestOpt(t, 3)
	for i := 0; i < 4; i++ {
		stepRandom(o, r)
	}
	st := &TrainState{Epoch: 2, Cursor: 7, Args: json.RawMessage(`{"lr":0.01}`), Buffers: []Param{{Name: "best", Data: vec([]float32{1, 2, 3})}}}
	if err := SaveCheckpoint(path, o, st); err != nil {
		t.Fatal(err)
	}
	return path, o
}

func load(t *testing.T, path string) error {
	o, _ := newTestOpt(t, 99)
	return LoadCheckpoint(path, o, &TrainState{Buffers: []Param{{Name: "best", Data: vec(make([]float32, 3))}}})
}

func dataStart(b []byte) int {
	return 8 + int(binary.LittleEndian.Uint64(b[:8]))
}

// Changed bytes in the tensor data or in the metadata (the header staying
// valid) are refused, naming the file and what to do.
func TestCheckpointDamageRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, b []byte)
	}{
		{"data", func(t *testing.T, b []byte) {
			d := dataStart(b)
			for i := d; i < min(d+400, len(b)); i++ {
				b[i] ^= 0x5a
			}
		}},
		{"one data bit", func(t *testing.T, b []byte) { b[len(b)-3] ^= 0x01 }},
		{"state metadata", func(t *testing.T, b []byte) {
			i := bytes.Index(b, []byte(`\"epoch\":2`))
			if i < 0 {
				t.Fatal("no epoch in the metadata")
			}
			b[i+len(`\"epoch\":`)] = '3'
		}},
		{"step metadata", func(t *testing.T, b []byte) {
			i := bytes.Index(b, []byte(`"step":"4"`))
			if i < 0 {
				t.Fatal("no step in the metadata")
			}
			b[i+len(`"step":"`)] = '5'
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, _ := savedCheckpoint(t)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c.damage(t, b)
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			err = load(t, path)
			if err == nil || !strings.Contains(err.Error(), "checkpoint "+path+" is damaged") ||
				!strings.Contains(err.Error(), "delete it to start the run over, or restore it from a copy") {
				t.Fatalf("damaged checkpoint: %v", err)
			}
		})
	}
	// An unreadable header gets the same advice.
	path, _ := savedCheckpoint(t)
	if err := os.WriteFile(path, []byte("\x10\x00\x00\x00\x00\x00\x00\x00{not json}      "), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := load(t, path); err == nil || !strings.Contains(err.Error(), "delete it to start the run over") {
		t.Fatalf("unreadable checkpoint: %v", err)
	}
}

// rewriteWithout rewrites the checkpoint at path with its tensors, after
// edit, and its metadata without the checksum, as an older drafter wrote it.
func rewriteWithout(t *testing.T, path string, edit func(name string, data []byte)) {
	t.Helper()
	set, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	md := map[string]string{}
	for k, v := range set.Metadata() {
		if k != checksumKey {
			md[k] = v
		}
	}
	var ts []safetensors.Tensor
	for _, n := range set.Names() {
		raw, info, err := set.Raw(n)
		if err != nil {
			t.Fatal(err)
		}
		data := append([]byte(nil), raw...)
		edit(n, data)
		ts = append(ts, safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: data})
	}
	set.Close()
	if err := safetensors.WriteFile(path, ts, md); err != nil {
		t.Fatal(err)
	}
}

// A checkpoint without a checksum (older builds) still resumes, with a note,
// as long as its values are finite.
func TestLegacyCheckpoint(t *testing.T) {
	path, saved := savedCheckpoint(t)
	if note := CheckpointNote(path); note != "" {
		t.Fatalf("note for a checksummed checkpoint: %q", note)
	}
	rewriteWithout(t, path, func(string, []byte) {})
	if note := CheckpointNote(path); !strings.Contains(note, path) || !strings.Contains(note, "no checksum") {
		t.Fatalf("note for a checkpoint without checksum: %q", note)
	}
	o, _ := newTestOpt(t, 99)
	if err := LoadCheckpoint(path, o, &TrainState{Buffers: []Param{{Name: "best", Data: vec(make([]float32, 3))}}}); err != nil {
		t.Fatalf("checkpoint without checksum: %v", err)
	}
	for i, p := range saved.Params {
		got := host(o.Params[i].Data)
		for j, v := range host(p.Data) {
			if math.Float32bits(got[j]) != math.Float32bits(v) {
				t.Fatalf("%s[%d] = %v, saved %v", p.Name, j, got[j], v)
			}
		}
	}
	rewriteWithout(t, path, func(name string, data []byte) {
		if name == "adam_v/b.weight" {
			binary.LittleEndian.PutUint32(data[4*5:], 0x7f800000)
		}
	})
	if err := load(t, path); err == nil || !strings.Contains(err.Error(), `tensor "adam_v/b.weight" element 5 is +Inf`) {
		t.Fatalf("infinite value in a checkpoint without checksum: %v", err)
	}
}

// A checkpoint saved from a run whose weights became NaN is refused on
// resume, although its checksum matches.
func TestCheckpointNaNRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.safetensors")
	o, _ := newTestOpt(t, 1)
	host(o.Params[1].Data)[4] = float32(math.NaN())
	if err := SaveCheckpoint(path, o, &TrainState{}); err != nil {
		t.Fatal(err)
	}
	fresh, _ := newTestOpt(t, 2)
	err := LoadCheckpoint(path, fresh, &TrainState{})
	if err == nil || !strings.Contains(err.Error(), `tensor "param/b.weight" element 4 is NaN`) || !strings.Contains(err.Error(), "diverged") {
		t.Fatalf("NaN weights: %v", err)
	}
}
