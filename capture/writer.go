package capture

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/finite"
)

// Sample is one sequence to store: its tokens, which of them are response tokens, and the
// captured states.
type Sample struct {
	// ID identifies the sample (usually the prompt's index); unique within a capture.
	ID int64
	// Tokens are the T token ids of the sequence, prompt and response.
	Tokens []int32
	// LossMask is true on response tokens; len T.
	LossMask []bool
	// States holds one slice per state column in Layout.Columns() order, each of length T*H,
	// row-major (position, hidden).
	States [][]float32
}

// ShardInfo describes one finished shard; it is what the manifest lists.
type ShardInfo struct {
	// File is the shard's file name inside the capture directory (shard-NNNNN.arrow).
	File string `json:"file"`
	// Index is NNNNN.
	Index int `json:"index"`
	// Rows is the number of token positions in the shard.
	Rows int64 `json:"rows"`
	// Samples is the number of samples in the shard.
	Samples int64 `json:"samples"`
	// ResponseTokens is the number of rows whose loss_mask is true.
	ResponseTokens int64 `json:"response_tokens"`
	// FirstSampleID and LastSampleID are the ids of the first and last sample written into
	// the shard (in write order).
	FirstSampleID int64 `json:"first_sample_id"`
	LastSampleID  int64 `json:"last_sample_id"`
	// Bytes is the file size.
	Bytes int64 `json:"bytes"`
	// SHA256 is the lowercase hex SHA-256 of the whole file.
	SHA256 string `json:"sha256"`
}

// Default sizes of ShardOptions.
const (
	DefaultMaxShardBytes = 1 << 30
	DefaultBatchBytes    = 16 << 20
)

// ShardOptions controls shard rotation and record batch sizes.
type ShardOptions struct {
	// MaxRows closes a shard once it holds at least this many rows; 0 means no row limit.
	MaxRows int64
	// MaxBytes closes a shard once it holds at least this many bytes; 0 means
	// DefaultMaxShardBytes, a negative value means no byte limit. Samples are never split,
	// so a shard may exceed the limit by up to one sample.
	MaxBytes int64
	// BatchBytes is the target size of one Arrow record batch; 0 means DefaultBatchBytes.
	// It bounds the writer's memory: roughly BatchBytes plus one sample.
	BatchBytes int64
	// FirstShard is the number NNNNN of the first shard this writer creates.
	FirstShard int
	// OnShard, when set, is called after each shard has been renamed to its final name and
	// the directory fsynced. An error it returns is returned by the Write or Close call that
	// finished the shard.
	OnShard func(ShardInfo) error
}

// ShardFileName returns "shard-NNNNN.arrow" for shard number n.
func ShardFileName(n int) string { return fmt.Sprintf("shard-%05d.arrow", n) }

// tmpSuffix names a file's temporary name while it is written (the
// package documentation's protocol): OpenForResume deletes such leftovers.
const tmpSuffix = ".tmp"

// createAtomic starts writing dir/name under its fixed temporary name
// (name.tmp), fsyncing the directory after the rename as the protocol
// requires.
func createAtomic(dir, name string) (*atomicfile.File, error) {
	return atomicfile.Create(filepath.Join(dir, name), atomicfile.Options{Temp: name + tmpSuffix, StrictDirSync: true})
}

// ShardWriter writes samples into a sequence of shard files in one directory. It is not
// safe for concurrent use. Most callers want Writer, which also keeps the manifest.
type ShardWriter struct {
	dir    string
	layout Layout
	schema *arrow.Schema
	cols   []string
	opt    ShardOptions
	seen   map[int64]struct{}

	// pending record batch, reused between batches
	rows   int
	ids    []int64
	pos    []int32
	tok    []int32
	mask   []byte
	states [][]byte

	cur    *shardFile
	next   int
	shards []ShardInfo
	err    error // sticky: set once the writer is in an unknown state
}

type shardFile struct {
	af   *atomicfile.File
	hw   hashCounter
	fw   *ipc.FileWriter
	tmp  string
	info ShardInfo
}

// hashCounter forwards writes to w while hashing and counting them.
type hashCounter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (c *hashCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// NewShardWriter prepares a writer of shards with the given layout into dir, which must exist.
// Nothing is created until the first sample is written.
func NewShardWriter(dir string, layout Layout, opt ShardOptions) (*ShardWriter, error) {
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if opt.FirstShard < 0 {
		return nil, fmt.Errorf("capture: first shard number %d: expected >= 0", opt.FirstShard)
	}
	if opt.MaxBytes == 0 {
		opt.MaxBytes = DefaultMaxShardBytes
	}
	if opt.BatchBytes <= 0 {
		opt.BatchBytes = DefaultBatchBytes
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("capture: output directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("capture: output directory %s is not a directory", dir)
	}
	layout.Layers = append([]int(nil), layout.Layers...)
	cols := layout.Columns()
	return &ShardWriter{
		dir: dir, layout: layout, schema: layout.Schema(), cols: cols, opt: opt,
		seen: map[int64]struct{}{}, states: make([][]byte, len(cols)), next: opt.FirstShard,
	}, nil
}

// skipIDs marks ids as already written, so that writing them again is refused.
func (w *ShardWriter) skipIDs(ids map[int64]struct{}) {
	for id := range ids {
		w.seen[id] = struct{}{}
	}
}

// Shards returns the shards finished so far.
func (w *ShardWriter) Shards() []ShardInfo { return append([]ShardInfo(nil), w.shards...) }

// NextShard returns the number the next shard will get.
func (w *ShardWriter) NextShard() int { return w.next }

// Write appends one whole sample. It may finish a shard (see ShardOptions). A sample holding
// a value the storage dtype cannot represent is rejected with an error naming the sample,
// position and column, and nothing of it is written; the writer stays usable. Other errors
// (I/O) leave the writer unusable: call Abort.
func (w *ShardWriter) Write(s Sample) error {
	if w.err != nil {
		return w.err
	}
	T := len(s.Tokens)
	H := w.layout.Hidden
	if T == 0 {
		return fmt.Errorf("capture: sample %d has no tokens", s.ID)
	}
	if len(s.LossMask) != T {
		return fmt.Errorf("capture: sample %d: loss mask has %d entries, expected one per token (%d)", s.ID, len(s.LossMask), T)
	}
	if len(s.States) != len(w.cols) {
		return fmt.Errorf("capture: sample %d: %d state slices, expected %d (%v)", s.ID, len(s.States), len(w.cols), w.cols)
	}
	for c, st := range s.States {
		if len(st) != T*H {
			return fmt.Errorf("capture: sample %d column %s: %d values, expected tokens*hidden = %d*%d = %d",
				s.ID, w.cols[c], len(st), T, H, T*H)
		}
	}
	if _, dup := w.seen[s.ID]; dup {
		return fmt.Errorf("capture: sample id %d was already written to this capture", s.ID)
	}

	// Convert the states first: a value the dtype cannot hold rejects the whole sample
	// before anything else is appended.
	es := w.layout.DType.Size()
	r0 := w.rows
	for c, st := range s.States {
		w.states[c] = grow(w.states[c], (r0+T)*H*es)
		if !encodeStates(w.states[c][r0*H*es:], st, w.layout.DType) {
			w.states[c] = w.states[c][:r0*H*es]
			for c2 := 0; c2 < c; c2++ {
				w.states[c2] = w.states[c2][:r0*H*es]
			}
			return w.unstorable(s, c)
		}
	}
	w.ids = growT(w.ids, r0+T)
	w.pos = growT(w.pos, r0+T)
	w.tok = growT(w.tok, r0+T)
	w.mask = grow(w.mask, (r0+T+7)/8)
	resp := int64(0)
	for t := 0; t < T; t++ {
		r := r0 + t
		w.ids[r] = s.ID
		w.pos[r] = int32(t)
		w.tok[r] = s.Tokens[t]
		bit := byte(1) << (uint(r) & 7)
		if s.LossMask[t] {
			w.mask[r>>3] |= bit
			resp++
		} else {
			w.mask[r>>3] &^= bit
		}
	}
	w.rows = r0 + T
	w.seen[s.ID] = struct{}{}

	if w.cur == nil {
		if err := w.openShard(); err != nil {
			w.err = err
			return err
		}
	}
	info := &w.cur.info
	if info.Samples == 0 {
		info.FirstSampleID = s.ID
	}
	info.LastSampleID = s.ID
	info.Samples++
	info.Rows += int64(T)
	info.ResponseTokens += resp

	if w.pendingBytes() >= w.opt.BatchBytes {
		if err := w.flushBatch(); err != nil {
			w.err = err
			return err
		}
	}
	full := w.opt.MaxRows > 0 && info.Rows >= w.opt.MaxRows
	if w.opt.MaxBytes > 0 && w.cur.hw.n+w.pendingBytes() >= w.opt.MaxBytes {
		full = true
	}
	if full {
		if err := w.finishShard(); err != nil {
			w.err = err
			return err
		}
	}
	return nil
}

// unstorable describes the first value of column c of s that the storage dtype cannot
// hold: a NaN or an infinity (never stored, whatever the dtype: the model produced it), or a
// finite value beyond float16's range (float32 storage holds it).
func (w *ShardWriter) unstorable(s Sample, c int) error {
	H := w.layout.Hidden
	i := firstUnstorable(s.States[c], w.layout.DType)
	if i < 0 { // cannot happen: encodeStates saw one
		return fmt.Errorf("capture: sample %d column %s: value not storable as %s", s.ID, w.cols[c], w.layout.DType)
	}
	v := s.States[c][i]
	where := fmt.Sprintf("capture: sample %d position %d column %s (element %d of %d)", s.ID, i/H, w.cols[c], i%H, H)
	if kind := finite.Kind32(math.Float32bits(v)); kind != "" {
		return fmt.Errorf("%s: the model produced %s; a hidden state that is not finite is never stored, "+
			"in any dtype: the checkpoint's weights hold NaN or infinity, or its activations overflow on this input", where, kind)
	}
	return fmt.Errorf("%s: value %g does not fit float16 (largest finite float16 is 65504); capture with --dtype float32",
		where, v)
}

func (w *ShardWriter) pendingBytes() int64 {
	n := int64(w.rows) * (8 + 4 + 4)
	for _, b := range w.states {
		n += int64(len(b))
	}
	return n
}

func (w *ShardWriter) openShard() error {
	name := ShardFileName(w.next)
	af, err := createAtomic(w.dir, name)
	if err != nil {
		return fmt.Errorf("capture: create shard: %w", err)
	}
	sf := &shardFile{af: af, tmp: af.TempName(), info: ShardInfo{File: name, Index: w.next}}
	sf.hw = hashCounter{w: af, h: sha256.New()}
	fw, err := ipc.NewFileWriter(&sf.hw, ipc.WithSchema(w.schema))
	if err != nil {
		af.Abort()
		return fmt.Errorf("capture: start Arrow file %s: %w", sf.tmp, err)
	}
	sf.fw = fw
	w.cur = sf
	return nil
}

// flushBatch writes the pending rows as one record batch, reading directly from the
// pending buffers (no copy), and resets them for reuse.
func (w *ShardWriter) flushBatch() error {
	n := w.rows
	if n == 0 {
		return nil
	}
	H := w.layout.Hidden
	es := w.layout.DType.Size()
	cols := make([]arrow.Array, 0, 4+len(w.states))
	defer func() {
		for _, a := range cols {
			a.Release()
		}
	}()
	mk := func(dt arrow.DataType, length int, buf []byte, child arrow.ArrayData) {
		var children []arrow.ArrayData
		var bufs []*memory.Buffer
		if child != nil {
			children = []arrow.ArrayData{child}
			bufs = []*memory.Buffer{nil}
		} else {
			bufs = []*memory.Buffer{nil, memory.NewBufferBytes(buf)}
		}
		d := array.NewData(dt, length, bufs, children, 0, 0)
		cols = append(cols, array.MakeFromData(d))
		d.Release()
	}
	mk(arrow.PrimitiveTypes.Int64, n, arrow.Int64Traits.CastToBytes(w.ids[:n]), nil)
	mk(arrow.PrimitiveTypes.Int32, n, arrow.Int32Traits.CastToBytes(w.pos[:n]), nil)
	mk(arrow.PrimitiveTypes.Int32, n, arrow.Int32Traits.CastToBytes(w.tok[:n]), nil)
	if n&7 != 0 { // keep the bitmap's unused tail bits zero so files are reproducible
		w.mask[n>>3] &= byte(1)<<(uint(n)&7) - 1
	}
	mk(arrow.FixedWidthTypes.Boolean, n, w.mask[:(n+7)/8], nil)
	for c, b := range w.states {
		child := array.NewData(w.layout.DType.arrow(), n*H, []*memory.Buffer{nil, memory.NewBufferBytes(b[:n*H*es])}, nil, 0, 0)
		mk(w.schema.Field(4+c).Type, n, nil, child)
		child.Release()
	}
	rec := array.NewRecordBatch(w.schema, cols, int64(n))
	err := w.cur.fw.Write(rec)
	rec.Release()
	if err != nil {
		return fmt.Errorf("capture: write record batch to %s: %w", w.cur.tmp, err)
	}
	w.rows = 0
	w.ids, w.pos, w.tok, w.mask = w.ids[:0], w.pos[:0], w.tok[:0], w.mask[:0]
	for c := range w.states {
		w.states[c] = w.states[c][:0]
	}
	return nil
}

// finishShard writes the pending batch and the footer, fsyncs, renames the shard to its
// final name, fsyncs the directory and reports it.
func (w *ShardWriter) finishShard() error {
	sf := w.cur
	if err := w.flushBatch(); err != nil {
		return err
	}
	if err := sf.fw.Close(); err != nil {
		return fmt.Errorf("capture: finish Arrow file %s: %w", sf.tmp, err)
	}
	if sf.af.Size() != sf.hw.n {
		return fmt.Errorf("capture: %s: %d bytes hashed, but %d written", sf.tmp, sf.hw.n, sf.af.Size())
	}
	if err := sf.af.Commit(); err != nil {
		return fmt.Errorf("capture: finish shard: %w", err)
	}
	sf.info.Bytes = sf.hw.n
	sf.info.SHA256 = hex.EncodeToString(sf.hw.h.Sum(nil))
	w.cur = nil
	w.next++
	w.shards = append(w.shards, sf.info)
	if w.opt.OnShard != nil {
		if err := w.opt.OnShard(sf.info); err != nil {
			return err
		}
	}
	return nil
}

// Close finishes the current shard, if any, and returns all shards this writer finished.
func (w *ShardWriter) Close() ([]ShardInfo, error) {
	if w.err != nil {
		return nil, w.err
	}
	if w.cur != nil {
		if err := w.finishShard(); err != nil {
			w.err = err
			return nil, err
		}
	}
	w.err = errors.New("capture: shard writer is closed")
	return w.Shards(), nil
}

// Abort stops writing and deletes the unfinished shard's temporary file. Finished shards
// stay. It is safe to call after Close or after an error.
func (w *ShardWriter) Abort() {
	if w.cur != nil {
		w.cur.af.Abort()
		w.cur = nil
	}
	if w.err == nil {
		w.err = errors.New("capture: shard writer was aborted")
	}
}

// grow returns b resized to n bytes, keeping its contents and reallocating with headroom
// when its capacity is too small.
func grow(b []byte, n int) []byte {
	return growT(b, n)
}

func growT[T any](b []T, n int) []T {
	if n <= cap(b) {
		return b[:n]
	}
	nb := make([]T, n, n+n/2)
	copy(nb, b)
	return nb
}
