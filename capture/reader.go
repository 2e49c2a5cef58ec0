package capture

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// shard is one memory-mapped shard file with its record batches decoded (zero-copy).
type shard struct {
	path    string
	data    []byte // the mapped file
	unmap   func() error
	fr      *ipc.FileReader
	batches []*batch
	// dtype, hidden and cols are the layout's storage type, hidden size
	// and state column names.
	dtype  DType
	hidden int
	cols   []string
}

// batch holds typed views of one record batch's columns. All slices point into the
// mapped file.
type batch struct {
	rec    arrow.RecordBatch
	ids    []int64
	pos    []int32
	tok    []int32
	mask   *array.Boolean
	states [][]byte // per state column: the raw child values, rows*H elements of dtype
	dtype  DType
}

// openShard maps dir/info.File, checks its schema against layout and its row count
// against info, and decodes the record batches. The file's bytes are trusted: arrow-go
// panics, or exhausts memory, on some damaged files, so verify a file that may be damaged
// before it is opened (openChecked).
func openShard(dir string, info ShardInfo, layout Layout) (*shard, error) {
	path := filepath.Join(dir, info.File)
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	return newShard(path, data, unmap, info, layout)
}

// newShard decodes the mapped shard data, unmapping it on error.
func newShard(path string, data []byte, unmap func() error, info ShardInfo, layout Layout) (*shard, error) {
	sh := &shard{path: path, data: data, unmap: unmap, dtype: layout.DType, hidden: layout.Hidden, cols: layout.Columns()}
	if err := sh.load(data, info, layout); err != nil {
		sh.close()
		return nil, err
	}
	return sh, nil
}

func (sh *shard) load(data []byte, info ShardInfo, layout Layout) error {
	path := sh.path
	var err error
	sh.fr, err = ipc.NewMappedFileReader(data)
	if err != nil {
		return fmt.Errorf("capture: %s is not a readable Arrow IPC file: %w", path, err)
	}
	if err := checkSchema(sh.fr.Schema(), layout, path); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	H := layout.Hidden
	es := layout.DType.Size()
	var rows int64
	for i := 0; i < sh.fr.NumRecords(); i++ {
		rec, err := sh.fr.RecordBatchAt(i)
		if err != nil {
			return fmt.Errorf("capture: %s record batch %d: %w", path, i, err)
		}
		b := &batch{rec: rec, dtype: layout.DType}
		sh.batches = append(sh.batches, b)
		n := int(rec.NumRows())
		ids, ok1 := rec.Column(0).(*array.Int64)
		pos, ok2 := rec.Column(1).(*array.Int32)
		tok, ok3 := rec.Column(2).(*array.Int32)
		mask, ok4 := rec.Column(3).(*array.Boolean)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return fmt.Errorf("capture: %s record batch %d: unexpected column array types", path, i)
		}
		for c := 0; c < 4; c++ {
			if rec.Column(c).NullN() != 0 {
				return fmt.Errorf("capture: %s record batch %d: column %s has nulls", path, i, rec.ColumnName(c))
			}
		}
		b.ids, b.pos, b.tok, b.mask = ids.Int64Values(), pos.Int32Values(), tok.Int32Values(), mask
		if len(b.ids) != n || len(b.pos) != n || len(b.tok) != n || mask.Len() != n {
			return fmt.Errorf("capture: %s record batch %d: column lengths disagree with %d rows", path, i, n)
		}
		for c := 4; c < int(rec.NumCols()); c++ {
			fsl, ok := rec.Column(c).(*array.FixedSizeList)
			if !ok || fsl.NullN() != 0 {
				return fmt.Errorf("capture: %s record batch %d: column %s is not a non-null fixed-size list", path, i, rec.ColumnName(c))
			}
			child := fsl.ListValues().Data()
			bufs := child.Buffers()
			if len(bufs) < 2 || bufs[1] == nil || child.NullN() != 0 {
				return fmt.Errorf("capture: %s record batch %d: column %s has no value buffer or has nulls", path, i, rec.ColumnName(c))
			}
			start := (child.Offset() + fsl.Data().Offset()*H) * es
			raw := bufs[1].Bytes()
			if start < 0 || start+n*H*es > len(raw) {
				return fmt.Errorf("capture: %s record batch %d: column %s holds %d bytes, expected %d rows x %d x %d bytes",
					path, i, rec.ColumnName(c), len(raw)-start, n, H, es)
			}
			b.states = append(b.states, raw[start:start+n*H*es])
		}
		rows += int64(n)
	}
	if rows != info.Rows {
		return fmt.Errorf("capture: %s holds %d rows, %s says %d", path, rows, ManifestName, info.Rows)
	}
	return nil
}

// sampleIDs calls fn once per sample (run of equal sample_id) in file order.
func (sh *shard) sampleIDs(fn func(id int64) error) error {
	for _, b := range sh.batches {
		for r := 0; r < len(b.ids); {
			id := b.ids[r]
			for r < len(b.ids) && b.ids[r] == id {
				r++
			}
			if err := fn(id); err != nil {
				return err
			}
		}
	}
	return nil
}

func (sh *shard) close() error {
	for _, b := range sh.batches {
		b.rec.Release()
	}
	sh.batches = nil
	sh.data = nil
	if sh.fr != nil {
		sh.fr.Close()
		sh.fr = nil
	}
	var err error
	if sh.unmap != nil {
		err = sh.unmap()
		sh.unmap = nil
	}
	return err
}

// sampleRef locates one sample: rows [row, row+n) of a record batch.
type sampleRef struct {
	b   *batch
	row int32
	n   int32
	id  int64
	dir int32
}

// DatasetOptions changes how OpenDatasetWith opens captures.
type DatasetOptions struct {
	// AllowIncomplete opens captures whose manifest is not marked complete (an interrupted
	// capture), using the shards it lists.
	AllowIncomplete bool
	// SkipVerify opens the shards without verifying their bytes: only their schema, row and
	// sample counts are checked against the manifest.
	SkipVerify bool
	// Cache remembers shards verified before, by file identity (see package filecache), so
	// that a shard unchanged since is not read again; nil verifies every shard.
	Cache *filecache.Cache
	// Recheck reads and verifies every shard even when Cache vouches for it.
	Recheck bool
}

// Dataset reads the samples of one or more capture directories through memory-mapped
// shards. Samples are numbered 0..NumSamples()-1: the directories in the order given,
// each in manifest shard order, then file order. Reading methods are safe for concurrent
// use; Close must not run concurrently with them.
type Dataset struct {
	dirs    []string
	mans    []*Manifest
	layout  Layout // DType is that of the first directory
	cols    []string
	shards  []*shard
	samples []sampleRef
	tokens  int64
	resp    int64
	// verified counts what opening verified.
	verified VerifyStats
	// decoders holds *decoder values, one per concurrent large State call.
	decoders sync.Pool
}

// decoder converts one range of stored state values to float32 over the cores.
// Its chunk method value is bound once, when the decoder is made, so handing it
// to tensor.Parallel costs no closure allocation per read; decoders are pooled
// per Dataset, so concurrent readers each use their own.
type decoder struct {
	dst   []float32
	src   []byte
	dtype DType
	chunk func(lo, hi int)
}

func newDecoder() any {
	d := &decoder{}
	d.chunk = d.run
	return d
}

func (d *decoder) run(lo, hi int) { decodeRange(d.dst[lo:hi], d.src, lo, d.dtype) }

// decodeRange converts len(dst) stored little-endian values of dtype, starting
// at element lo of src, to float32 in dst.
func decodeRange(dst []float32, src []byte, lo int, dtype DType) {
	if dtype == Float16 {
		decodeF16(dst, src[2*lo:2*(lo+len(dst))])
	} else {
		decodeF32(dst, src[4*lo:4*(lo+len(dst))])
	}
}

// decode converts the stored values src of dtype into dst (len(dst) elements).
// A state smaller than two conversion chunks, which tensor.Parallel would run
// on one core anyway, is converted in place; a larger one is split over the
// cores through a pooled decoder. Neither path allocates.
func (ds *Dataset) decode(dst []float32, src []byte, dtype DType) {
	if len(dst) < 2*convertChunk {
		decodeRange(dst, src, 0, dtype)
		return
	}
	d := ds.decoders.Get().(*decoder)
	d.dst, d.src, d.dtype = dst, src, dtype
	tensor.Parallel(len(dst), convertChunk, d.chunk)
	d.dst, d.src = nil, nil
	ds.decoders.Put(d)
}

// OpenDataset opens complete captures for reading; see OpenDatasetWith.
func OpenDataset(dirs ...string) (*Dataset, error) {
	return OpenDatasetWith(DatasetOptions{}, dirs...)
}

// OpenDatasetWith opens the captures in dirs. All must agree on model fingerprint, hidden
// size, layers and final_norm (the storage dtype may differ). Every shard is verified
// unless opt.SkipVerify: its size and SHA-256 must match its manifest and every stored
// state must be finite (no NaN, no infinity), several shards at once; an error names the
// file, and for a non-finite value its row, sample id, position and column. Every shard's
// schema and row count is checked against its manifest, and an index of every sample is
// built.
func OpenDatasetWith(opt DatasetOptions, dirs ...string) (*Dataset, error) {
	if len(dirs) == 0 {
		return nil, errors.New("capture: no capture directory given")
	}
	ds := &Dataset{}
	ds.decoders.New = newDecoder
	if err := ds.open(opt, dirs); err != nil {
		ds.Close()
		return nil, err
	}
	return ds, nil
}

func (ds *Dataset) open(opt DatasetOptions, dirs []string) error {
	var refs []shardRef
	for d, dir := range dirs {
		m, err := ReadManifest(dir)
		if err != nil {
			return err
		}
		if !m.Complete && !opt.AllowIncomplete {
			cmd := m.Args["command"] // distill or capture
			if cmd == "" {
				cmd = "distill (or capture)"
			}
			return fmt.Errorf("capture: the capture in %s is incomplete (%d samples in %d shards): rerun the same drafter %s command to finish it",
				dir, m.Totals.Samples, len(m.Shards), cmd)
		}
		if d == 0 {
			ds.layout = m.Layout()
			ds.cols = m.Layout().Columns()
		} else {
			f := ds.mans[0]
			switch {
			case m.ModelFingerprint != f.ModelFingerprint:
				return fmt.Errorf("capture: %s and %s were captured from different models (fingerprints %s and %s)",
					dirs[0], dir, f.ModelFingerprint, m.ModelFingerprint)
			case m.HiddenSize != f.HiddenSize:
				return fmt.Errorf("capture: %s and %s have different hidden sizes (%d and %d)", dirs[0], dir, f.HiddenSize, m.HiddenSize)
			case !slices.Equal(m.Layers, f.Layers) || m.FinalNorm != f.FinalNorm:
				return fmt.Errorf("capture: %s and %s hold different states (%v and %v)", dirs[0], dir, f.Columns, m.Columns)
			}
		}
		ds.dirs = append(ds.dirs, dir)
		ds.mans = append(ds.mans, m)
		refs = append(refs, shardRefs(dir, m)...)
	}
	shards, st, err := openShards(refs, checks{verify: !opt.SkipVerify, cache: opt.Cache, recheck: opt.Recheck, keep: true})
	if err != nil {
		return err
	}
	ds.shards, ds.verified = shards, st
	for d, m := range ds.mans {
		if err := ds.index(int32(d), ds.dirs[d], m, shards[:len(m.Shards)]); err != nil {
			return err
		}
		shards = shards[len(m.Shards):]
	}
	return nil
}

// index appends the samples of the shards of one directory.
func (ds *Dataset) index(d int32, dir string, m *Manifest, shards []*shard) error {
	seen := make(map[int64]struct{}, m.Totals.Samples)
	for si, info := range m.Shards {
		sh := shards[si]
		var samples int64
		var prev *batch
		var prevID int64
		for bi, b := range sh.batches {
			for r := 0; r < len(b.ids); {
				id := b.ids[r]
				start := r
				for r < len(b.ids) && b.ids[r] == id {
					if b.pos[r] != int32(r-start) {
						return fmt.Errorf("capture: %s record batch %d row %d: sample %d has position %d, expected %d (rows of a sample must be contiguous and in order)",
							sh.path, bi, r, id, b.pos[r], r-start)
					}
					r++
				}
				if start == 0 && prev != nil && prevID == id {
					return fmt.Errorf("capture: %s record batch %d: sample %d continues from the previous batch (a sample must be in one batch)", sh.path, bi, id)
				}
				if _, dup := seen[id]; dup {
					return fmt.Errorf("capture: %s: sample id %d appears twice in %s", sh.path, id, dir)
				}
				seen[id] = struct{}{}
				ds.samples = append(ds.samples, sampleRef{b: b, row: int32(start), n: int32(r - start), id: id, dir: d})
				samples++
				prev, prevID = b, id
			}
		}
		if samples != info.Samples {
			return fmt.Errorf("capture: %s holds %d samples, %s says %d", sh.path, samples, ManifestName, info.Samples)
		}
		ds.tokens += info.Rows
		ds.resp += info.ResponseTokens
	}
	return nil
}

// Close unmaps every shard. Slices obtained from the dataset stay valid (they are copies).
func (ds *Dataset) Close() error {
	var first error
	for _, sh := range ds.shards {
		if err := sh.close(); err != nil && first == nil {
			first = fmt.Errorf("capture: unmap %s: %w", sh.path, err)
		}
	}
	ds.shards = nil
	ds.samples = nil
	return first
}

// Verified returns what opening the dataset verified: how many shards were read and how
// many the cache vouched for.
func (ds *Dataset) Verified() VerifyStats { return ds.verified }

// Dirs returns the capture directories in order.
func (ds *Dataset) Dirs() []string { return append([]string(nil), ds.dirs...) }

// Manifests returns the manifest of each directory, in order.
func (ds *Dataset) Manifests() []*Manifest { return append([]*Manifest(nil), ds.mans...) }

// Layout returns the layout of the first directory (layers, final norm and hidden size are
// the same in all; DType is the first directory's).
func (ds *Dataset) Layout() Layout {
	l := ds.layout
	l.Layers = append([]int(nil), l.Layers...)
	return l
}

// HiddenSize returns H.
func (ds *Dataset) HiddenSize() int { return ds.layout.Hidden }

// Columns returns the state column names; their positions are the column indices taken by
// State and ReadSample.
func (ds *Dataset) Columns() []string { return append([]string(nil), ds.cols...) }

// ColumnIndex returns the index of the state column name ("hidden_<k>" or "final_norm").
func (ds *Dataset) ColumnIndex(name string) (int, error) {
	if i := slices.Index(ds.cols, name); i >= 0 {
		return i, nil
	}
	return -1, fmt.Errorf("capture: no state column %q in %v (columns: %v)", name, ds.dirs, ds.cols)
}

// NumSamples returns the number of samples over all directories.
func (ds *Dataset) NumSamples() int { return len(ds.samples) }

// NumTokens returns the number of stored positions (prompt and response) over all directories.
func (ds *Dataset) NumTokens() int64 { return ds.tokens }

// NumResponseTokens returns the number of positions whose loss mask is true.
func (ds *Dataset) NumResponseTokens() int64 { return ds.resp }

// SampleLen returns the number of tokens T of sample i.
func (ds *Dataset) SampleLen(i int) int { return int(ds.samples[i].n) }

// SampleID returns the id sample i was written with (unique within its directory only).
func (ds *Dataset) SampleID(i int) int64 { return ds.samples[i].id }

// SampleDir returns the index (into Dirs) of the directory sample i comes from.
func (ds *Dataset) SampleDir(i int) int { return int(ds.samples[i].dir) }

// Tokens copies the token ids of sample i into dst (reallocated when its capacity is too
// small) and returns dst[:T].
func (ds *Dataset) Tokens(i int, dst []int32) []int32 {
	s := ds.samples[i]
	dst = growT(dst[:0], int(s.n))
	copy(dst, s.b.tok[s.row:s.row+s.n])
	return dst
}

// LossMask copies the loss mask of sample i into dst (reallocated when too small) and
// returns dst[:T].
func (ds *Dataset) LossMask(i int, dst []bool) []bool {
	s := ds.samples[i]
	dst = growT(dst[:0], int(s.n))
	for t := range dst {
		dst[t] = s.b.mask.Value(int(s.row) + t)
	}
	return dst
}

// State converts state column col of sample i to float32 into dst (reallocated when its
// capacity is below T*H) and returns dst[:T*H], row-major (position, hidden).
func (ds *Dataset) State(i, col int, dst []float32) []float32 {
	return ds.StateRows(i, col, 0, ds.SampleLen(i), dst)
}

// StateRows is State restricted to positions [lo, hi) of sample i; it returns
// dst[:(hi-lo)*H]. It panics when the range is outside the sample, like slicing.
// It allocates nothing when dst has room.
func (ds *Dataset) StateRows(i, col, lo, hi int, dst []float32) []float32 {
	s := ds.samples[i]
	if lo < 0 || hi < lo || hi > int(s.n) {
		panic(fmt.Sprintf("capture: positions [%d,%d) outside sample %d of length %d", lo, hi, i, s.n))
	}
	H := ds.layout.Hidden
	es := s.b.dtype.Size()
	dst = growT(dst[:0], (hi-lo)*H)
	first := (int(s.row) + lo) * H * es
	ds.decode(dst, s.b.states[col][first:first+(hi-lo)*H*es], s.b.dtype)
	return dst
}

// SampleBuf receives one sample from ReadSample; its slices are reused between calls.
type SampleBuf struct {
	// ID is the sample's id, Dir its directory index.
	ID  int64
	Dir int
	// Tokens and LossMask have length T.
	Tokens   []int32
	LossMask []bool
	// States[j] holds column cols[j] of the ReadSample call, T*H values.
	States [][]float32
}

// ReadSample reads sample i with the state columns cols (indices into Columns) into buf,
// reusing buf's slices.
func (ds *Dataset) ReadSample(i int, cols []int, buf *SampleBuf) {
	s := ds.samples[i]
	buf.ID, buf.Dir = s.id, int(s.dir)
	buf.Tokens = ds.Tokens(i, buf.Tokens)
	buf.LossMask = ds.LossMask(i, buf.LossMask)
	buf.States = growT(buf.States, len(cols))
	for j, c := range cols {
		buf.States[j] = ds.State(i, c, buf.States[j])
	}
}
