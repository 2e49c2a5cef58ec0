package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// The GGUF container, version 3, as specified by ggml's gguf.h: the magic
// "GGUF", the version, the tensor and key/value counts (64-bit), the key/value
// pairs, one info record per tensor (name, rank, dimensions innermost first,
// element type, offset into the data section), padding to the alignment, and
// the data section in which every tensor starts on an aligned offset. All
// integers are little-endian; strings are a 64-bit length and the bytes
// without a terminator.
const (
	ggufMagic     = "GGUF"
	ggufVersion   = 3
	ggufAlignment = 32 // GGUF_DEFAULT_ALIGNMENT; we do not write general.alignment
)

// GGUF metadata value types (gguf_type).
const (
	typeUint32  = 4
	typeInt32   = 5
	typeFloat32 = 6
	typeBool    = 7
	typeString  = 8
	typeArray   = 9
)

// ggmlTypeF32 is ggml_type GGML_TYPE_F32.
const ggmlTypeF32 = 0

// ggufTensor is one float32 tensor to write. Dims are in ggml order
// (innermost, i.e. the row length, first); load returns the elements in
// row-major order and is called only while the data section is written, so a
// large checkpoint is never held in memory whole.
type ggufTensor struct {
	name string
	dims []uint64
	load func() ([]float32, error)
}

func (t *ggufTensor) numel() uint64 {
	n := uint64(1)
	for _, d := range t.dims {
		n *= d
	}
	return n
}

// ggufFile collects metadata and tensors, then writes them in one pass.
type ggufFile struct {
	kv      []byte // encoded key/value pairs
	nkv     uint64
	tensors []ggufTensor
}

func appendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func appendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }
func appendStr(b []byte, s string) []byte { return append(appendU64(b, uint64(len(s))), s...) }

func (f *ggufFile) key(k string, typ uint32) {
	f.kv = appendU32(appendStr(f.kv, k), typ)
	f.nkv++
}

// String adds a string value.
func (f *ggufFile) String(k, v string) { f.key(k, typeString); f.kv = appendStr(f.kv, v) }

// Uint32 adds a uint32 value.
func (f *ggufFile) Uint32(k string, v uint32) { f.key(k, typeUint32); f.kv = appendU32(f.kv, v) }

// Float32 adds a float32 value.
func (f *ggufFile) Float32(k string, v float32) {
	f.key(k, typeFloat32)
	f.kv = appendU32(f.kv, math.Float32bits(v))
}

// Bool adds a bool value (one byte).
func (f *ggufFile) Bool(k string, v bool) {
	f.key(k, typeBool)
	b := byte(0)
	if v {
		b = 1
	}
	f.kv = append(f.kv, b)
}

func (f *ggufFile) arrayHead(k string, elem uint32, n int) {
	f.key(k, typeArray)
	f.kv = appendU64(appendU32(f.kv, elem), uint64(n))
}

// Strings adds an array of strings.
func (f *ggufFile) Strings(k string, v []string) {
	f.arrayHead(k, typeString, len(v))
	for _, s := range v {
		f.kv = appendStr(f.kv, s)
	}
}

// Float32s adds an array of float32.
func (f *ggufFile) Float32s(k string, v []float32) {
	f.arrayHead(k, typeFloat32, len(v))
	for _, x := range v {
		f.kv = appendU32(f.kv, math.Float32bits(x))
	}
}

// Int32s adds an array of int32.
func (f *ggufFile) Int32s(k string, v []int32) {
	f.arrayHead(k, typeInt32, len(v))
	for _, x := range v {
		f.kv = appendU32(f.kv, uint32(x))
	}
}

// Tensor adds a float32 tensor.
func (f *ggufFile) Tensor(name string, dims []uint64, load func() ([]float32, error)) {
	f.tensors = append(f.tensors, ggufTensor{name: name, dims: dims, load: load})
}

func alignUp(n uint64) uint64 { return (n + ggufAlignment - 1) / ggufAlignment * ggufAlignment }

// WriteFile writes the file atomically: a temporary file in the destination
// folder, fsync, rename.
func (f *ggufFile) WriteFile(path string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("gguf: create temporary file beside %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("gguf: chmod %s: %w", tmp.Name(), err)
	}
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = f.write(bw); err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("gguf: write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("gguf: fsync %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("gguf: close %s: %w", tmp.Name(), err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("gguf: rename %s to %s: %w", tmp.Name(), path, err)
	}
	return nil
}

func (f *ggufFile) write(w io.Writer) error {
	hdr := []byte(ggufMagic)
	hdr = appendU32(hdr, ggufVersion)
	hdr = appendU64(hdr, uint64(len(f.tensors)))
	hdr = appendU64(hdr, f.nkv)
	hdr = append(hdr, f.kv...)
	off := uint64(0)
	for i := range f.tensors {
		t := &f.tensors[i]
		hdr = appendStr(hdr, t.name)
		hdr = appendU32(hdr, uint32(len(t.dims)))
		for _, d := range t.dims {
			hdr = appendU64(hdr, d)
		}
		hdr = appendU32(hdr, ggmlTypeF32)
		hdr = appendU64(hdr, off)
		off = alignUp(off + 4*t.numel())
	}
	hdr = append(hdr, make([]byte, alignUp(uint64(len(hdr)))-uint64(len(hdr)))...)
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	var buf []byte
	for i := range f.tensors {
		t := &f.tensors[i]
		data, err := t.load()
		if err != nil {
			return err
		}
		if uint64(len(data)) != t.numel() {
			return fmt.Errorf("tensor %s: %d elements, want %d for dims %v", t.name, len(data), t.numel(), t.dims)
		}
		n := 4 * uint64(len(data))
		if uint64(cap(buf)) < alignUp(n) {
			buf = make([]byte, alignUp(n))
		}
		b := buf[:alignUp(n)]
		safetensors.EncodeF32(b[:n], data)
		clear(b[n:])
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}
