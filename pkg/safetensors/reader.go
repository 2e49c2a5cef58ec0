package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// IndexFile is the name of the shard index of a sharded checkpoint.
const IndexFile = "model.safetensors.index.json"

// SingleFile is the name of an unsharded checkpoint's weights.
const SingleFile = "model.safetensors"

// mapped is one memory-mapped file.
type mapped struct {
	path string
	data []byte
	stat os.FileInfo // of the open file that was mapped
}

// entry locates one tensor: its Info and the mapped file holding it.
type entry struct {
	info Info
	file *mapped
}

// Set is a read-only collection of tensors from one file or the shards of one folder.
// Its methods may be called concurrently, except Close. Slices returned by Raw view the
// memory-mapped files and are valid only until Close.
type Set struct {
	files   []*mapped
	tensors map[string]entry
	names   []string
	meta    map[string]string
	closed  bool
}

// Open memory-maps one safetensors file and validates its header.
func Open(path string) (*Set, error) {
	m, infos, meta, err := openFile(path)
	if err != nil {
		return nil, err
	}
	s := &Set{files: []*mapped{m}, tensors: make(map[string]entry, len(infos)), meta: meta}
	for _, in := range infos {
		s.tensors[in.Name] = entry{in, m}
		s.names = append(s.names, in.Name)
	}
	if s.meta == nil {
		s.meta = map[string]string{}
	}
	return s, nil
}

// openFile maps path and parses its header.
func openFile(path string) (*mapped, []Info, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	size := st.Size()
	if size < 8 {
		return nil, nil, nil, fmt.Errorf("safetensors: %s: file has %d bytes, too short for the 8-byte header length", path, size)
	}
	var lenBuf [8]byte
	if _, err := io.ReadFull(f, lenBuf[:]); err != nil {
		return nil, nil, nil, fmt.Errorf("safetensors: %s: reading header length: %w", path, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, nil, nil, fmt.Errorf("safetensors: %s: header length %d exceeds the %d-byte limit (corrupt file or not safetensors)", path, n, MaxHeaderSize)
	}
	if n > uint64(size-8) {
		return nil, nil, nil, fmt.Errorf("safetensors: %s: header length %d is larger than the %d bytes that follow it (file truncated or not safetensors)", path, n, size-8)
	}
	data, err := mapFile(f, size)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("safetensors: %s: mmap: %w", path, err)
	}
	dataStart := 8 + int64(n)
	infos, meta, err := parseHeader(path, data[8:dataStart], dataStart, size-dataStart)
	if err != nil {
		unmapFile(data)
		return nil, nil, nil, err
	}
	return &mapped{path: path, data: data, stat: st}, infos, meta, nil
}

// index is the JSON layout of model.safetensors.index.json.
type index struct {
	WeightMap map[string]string `json:"weight_map"`
}

// OpenDir opens the weights of a Hugging Face model folder: the shards listed in
// model.safetensors.index.json when it exists, otherwise model.safetensors.
//
// For a sharded folder every shard the index names must exist, every tensor the index
// names must be in the shard it names, and no tensor may appear in two shards. Tensors a
// shard holds beyond the index are included. Metadata() merges the shards' __metadata__
// maps (the first shard in name order wins a conflicting key).
func OpenDir(dir string) (*Set, error) {
	idxPath := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(idxPath)
	if errors.Is(err, os.ErrNotExist) {
		single := filepath.Join(dir, SingleFile)
		if _, err := os.Stat(single); err != nil {
			found, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
			for i := range found {
				found[i] = filepath.Base(found[i])
			}
			extra := ""
			if len(found) > 0 {
				extra = fmt.Sprintf(" (found %s, which drafter does not read as model weights)", strings.Join(found, ", "))
			}
			return nil, fmt.Errorf("safetensors: %s has neither %s nor %s%s", dir, SingleFile, IndexFile, extra)
		}
		return Open(single)
	}
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx index
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("safetensors: %s: invalid JSON: %w", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors: %s: weight_map is missing or empty", idxPath)
	}
	var shardNames []string
	byShard := map[string][]string{}
	for tensor, shard := range idx.WeightMap {
		if !filepath.IsLocal(shard) {
			return nil, fmt.Errorf("safetensors: %s: tensor %q maps to %q, which is not a file inside %s", idxPath, tensor, shard, dir)
		}
		if _, ok := byShard[shard]; !ok {
			shardNames = append(shardNames, shard)
		}
		byShard[shard] = append(byShard[shard], tensor)
	}
	sort.Strings(shardNames)
	s := &Set{tensors: map[string]entry{}, meta: map[string]string{}}
	for _, shard := range shardNames {
		p := filepath.Join(dir, shard)
		if _, err := os.Stat(p); err != nil {
			s.Close()
			return nil, fmt.Errorf("safetensors: shard %s named by %s is missing: %w", shard, idxPath, err)
		}
		m, infos, meta, err := openFile(p)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.files = append(s.files, m)
		for _, in := range infos {
			if prev, dup := s.tensors[in.Name]; dup {
				s.Close()
				return nil, fmt.Errorf("safetensors: tensor %q is in two shards: %s and %s", in.Name, prev.file.path, p)
			}
			s.tensors[in.Name] = entry{in, m}
		}
		for k, v := range meta {
			if _, ok := s.meta[k]; !ok {
				s.meta[k] = v
			}
		}
	}
	for _, shard := range shardNames {
		names := byShard[shard]
		sort.Strings(names)
		for _, name := range names {
			e, ok := s.tensors[name]
			p := filepath.Join(dir, shard)
			if !ok {
				s.Close()
				return nil, fmt.Errorf("safetensors: %s maps tensor %q to %s, but no shard holds it", idxPath, name, p)
			}
			if e.file.path != p {
				s.Close()
				return nil, fmt.Errorf("safetensors: %s maps tensor %q to %s, but it is in %s", idxPath, name, p, e.file.path)
			}
		}
	}
	for name := range s.tensors {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	return s, nil
}

// Names returns the tensor names in sorted order. The slice must not be modified.
func (s *Set) Names() []string { return s.names }

// Len returns the number of tensors.
func (s *Set) Len() int { return len(s.names) }

// Files returns the paths of the files the Set maps, in the order they were opened.
func (s *Set) Files() []string {
	out := make([]string, len(s.files))
	for i, f := range s.files {
		out[i] = f.path
	}
	return out
}

// FileStats returns the status of each file of Files, in the same order, as it
// was when the file was opened and mapped: it describes the bytes the Set
// reads even if the path has been replaced since.
func (s *Set) FileStats() []os.FileInfo {
	out := make([]os.FileInfo, len(s.files))
	for i, f := range s.files {
		out[i] = f.stat
	}
	return out
}

// Metadata returns the __metadata__ string map (empty, never nil, when absent). The map
// must not be modified.
func (s *Set) Metadata() map[string]string { return s.meta }

// Info returns the description of a tensor and whether it exists. The shape is a copy.
func (s *Set) Info(name string) (Info, bool) {
	e, ok := s.tensors[name]
	return e.info.clone(), ok
}

// clone returns the Info with its own copy of the shape.
func (i Info) clone() Info {
	i.Shape = append([]int{}, i.Shape...)
	return i
}

// lookup finds a tensor or returns an error naming it and the Set's files.
func (s *Set) lookup(name string) (entry, error) {
	if s.closed {
		return entry{}, fmt.Errorf("safetensors: reading tensor %q from a closed Set", name)
	}
	e, ok := s.tensors[name]
	if !ok {
		return entry{}, fmt.Errorf("safetensors: no tensor %q in %s", name, strings.Join(s.Files(), ", "))
	}
	return e, nil
}

// Raw returns a zero-copy view of a tensor's bytes (little-endian, row-major). The view
// is read-only and valid until Close.
func (s *Set) Raw(name string) ([]byte, Info, error) {
	e, err := s.lookup(name)
	if err != nil {
		return nil, Info{}, err
	}
	return e.file.data[e.info.Offset : e.info.Offset+e.info.Size : e.info.Offset+e.info.Size], e.info.clone(), nil
}

// Float32 returns a new float32 copy of an F32, F16 or BF16 tensor and its shape.
func (s *Set) Float32(name string) ([]float32, []int, error) {
	e, err := s.lookup(name)
	if err != nil {
		return nil, nil, err
	}
	out := make([]float32, e.info.NumElements())
	if err := s.Float32Into(name, out); err != nil {
		return nil, nil, err
	}
	return out, append([]int(nil), e.info.Shape...), nil
}

// Float32Into converts an F32, F16 or BF16 tensor into dst, whose length must equal the
// tensor's element count. It lets callers reuse buffers.
func (s *Set) Float32Into(name string, dst []float32) error {
	e, err := s.lookup(name)
	if err != nil {
		return err
	}
	in := e.info
	if len(dst) != in.NumElements() {
		return fmt.Errorf("safetensors: tensor %q in %s has %d elements (shape %s), destination has %d",
			name, in.File, in.NumElements(), ShapeString(in.Shape), len(dst))
	}
	src := e.file.data[in.Offset : in.Offset+in.Size]
	switch in.DType {
	case F32:
		DecodeF32(dst, src)
	case F16:
		DecodeF16(dst, src)
	case BF16:
		DecodeBF16(dst, src)
	default:
		return fmt.Errorf("safetensors: tensor %q in %s has dtype %s; only F32, F16 and BF16 convert to float32", name, in.File, in.DType)
	}
	return nil
}

// Int64 returns a new copy of an I64 or I32 tensor widened to int64, and its shape.
func (s *Set) Int64(name string) ([]int64, []int, error) {
	b, in, err := s.Raw(name)
	if err != nil {
		return nil, nil, err
	}
	out := make([]int64, in.NumElements())
	switch in.DType {
	case I64:
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
	case I32:
		for i := range out {
			out[i] = int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
	default:
		return nil, nil, fmt.Errorf("safetensors: tensor %q in %s has dtype %s; Int64 reads I64 or I32", name, in.File, in.DType)
	}
	return out, append([]int(nil), in.Shape...), nil
}

// Int32 returns a new copy of an I32 tensor, or of an I64 tensor whose values all fit in
// int32 (an error names the first that does not), and its shape.
func (s *Set) Int32(name string) ([]int32, []int, error) {
	b, in, err := s.Raw(name)
	if err != nil {
		return nil, nil, err
	}
	out := make([]int32, in.NumElements())
	switch in.DType {
	case I32:
		for i := range out {
			out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case I64:
		for i := range out {
			v := int64(binary.LittleEndian.Uint64(b[8*i:]))
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, nil, fmt.Errorf("safetensors: tensor %q in %s: element %d = %d does not fit in int32", name, in.File, i, v)
			}
			out[i] = int32(v)
		}
	default:
		return nil, nil, fmt.Errorf("safetensors: tensor %q in %s has dtype %s; Int32 reads I32 or I64", name, in.File, in.DType)
	}
	return out, append([]int(nil), in.Shape...), nil
}

// Bool returns a new copy of a BOOL tensor (any nonzero byte is true) and its shape.
func (s *Set) Bool(name string) ([]bool, []int, error) {
	b, in, err := s.Raw(name)
	if err != nil {
		return nil, nil, err
	}
	if in.DType != BOOL {
		return nil, nil, fmt.Errorf("safetensors: tensor %q in %s has dtype %s; Bool reads BOOL", name, in.File, in.DType)
	}
	out := make([]bool, len(b))
	for i, v := range b {
		out[i] = v != 0
	}
	return out, append([]int(nil), in.Shape...), nil
}

// Close unmaps the files. Views returned by Raw must not be used afterwards. Calling
// Close again is a no-op.
func (s *Set) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var first error
	for _, f := range s.files {
		if err := unmapFile(f.data); err != nil && first == nil {
			first = fmt.Errorf("safetensors: %s: munmap: %w", f.path, err)
		}
		f.data = nil
	}
	return first
}
