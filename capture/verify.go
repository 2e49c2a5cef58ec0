package capture

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/finite"
)

// verifiedKind is the filecache kind of a verified shard: the file had the
// recorded SHA-256 and held finite states only. The SHA-256 is stored so that
// an entry vouches for a shard only when its manifest still lists that hash.
const verifiedKind = "capture-shard-verified-v1"

// verified is the cached value of a verified shard.
type verified struct {
	SHA256 string `json:"sha256"`
}

// VerifyStats counts the shards a verification looked at.
type VerifyStats struct {
	// Shards is the number of shards verified; Read of them were read in
	// full (Bytes in total) and Cached of them were vouched for by the cache
	// (unchanged since they were verified).
	Shards, Read, Cached int
	Bytes                int64
}

// checks say how shards are opened: verify reads every byte of a shard to
// compare its SHA-256 with the manifest and tests every state for NaN and
// infinity, unless cache vouches for the file (recheck ignores the cache).
type checks struct {
	verify  bool
	cache   *filecache.Cache
	recheck bool
	// keep leaves the shards open for reading; otherwise each is closed
	// once verified.
	keep bool
}

// shardRef is one listed shard of a capture.
type shardRef struct {
	dir    string
	info   ShardInfo
	layout Layout
}

// openShards opens (and, with c.verify, verifies) the shards refs lists,
// several at once on the available cores. On error every shard opened is
// closed and the error of the first failing shard in refs order is returned,
// whatever the order the shards were done in.
func openShards(refs []shardRef, c checks) ([]*shard, VerifyStats, error) {
	out := make([]*shard, len(refs))
	errs := make([]error, len(refs))
	results := make([]shardResult, len(refs))
	var next atomic.Int64
	var failed atomic.Int64 // lowest index that failed; len(refs) when none
	failed.Store(int64(len(refs)))
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(refs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(refs)) || i > failed.Load() {
					return // an earlier shard failed: its error is the one reported
				}
				out[i], results[i], errs[i] = openChecked(refs[i], c)
				if errs[i] == nil {
					continue
				}
				for f := failed.Load(); i < f && !failed.CompareAndSwap(f, i); f = failed.Load() {
				}
			}
		}()
	}
	wg.Wait()
	var st VerifyStats
	for i, r := range results {
		if errs[i] != nil {
			closeShards(out)
			return nil, st, errs[i]
		}
		if c.verify {
			st.Shards++
			if r.cached {
				st.Cached++
			} else {
				st.Read++
				st.Bytes += refs[i].info.Bytes
			}
		}
	}
	return out, st, nil
}

func closeShards(shards []*shard) {
	for _, sh := range shards {
		if sh != nil {
			sh.close()
		}
	}
}

// shardResult tells how a shard was verified.
type shardResult struct {
	cached bool
}

// openChecked opens one shard and verifies it as c says: size first, then (unless the
// cache vouches for the file) its SHA-256 over the mapped bytes, and only then are the
// bytes parsed, for arrow-go panics or exhausts memory on some damaged files; last, every
// state value is tested for NaN and infinity (from memory: hashing brought the file in).
// The shard is closed again unless c.keep.
func openChecked(ref shardRef, c checks) (*shard, shardResult, error) {
	path := filepath.Join(ref.dir, ref.info.File)
	var res shardResult
	var before filecache.Identity
	if c.verify {
		var err error
		if before, err = filecache.Stat(path); err != nil {
			return nil, res, missingOr(path, err)
		}
		if before.Size != ref.info.Bytes {
			return nil, res, sizeError(path, before.Size, ref.info.Bytes)
		}
		var v verified
		res.cached = !c.recheck && c.cache.Get(verifiedKind, before, &v) && v.SHA256 == ref.info.SHA256
	}
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, res, err
	}
	if res.cached {
		// The mapping must be of the file the cache vouched for.
		if now, err := filecache.Stat(path); err != nil || now != before {
			res.cached = false
		}
	}
	verify := c.verify && !res.cached
	if verify {
		if int64(len(data)) != ref.info.Bytes {
			unmap()
			return nil, res, sizeError(path, int64(len(data)), ref.info.Bytes)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != ref.info.SHA256 {
			unmap()
			return nil, res, checksumError(path, got, ref.info.SHA256)
		}
	}
	sh, err := newShard(path, data, unmap, ref.info, ref.layout)
	if err != nil {
		return nil, res, err
	}
	if verify {
		if err := sh.checkFinite(); err != nil {
			sh.close()
			return nil, res, err
		}
		c.cache.Put(verifiedKind, before, verified{SHA256: ref.info.SHA256}) // losing an entry costs a re-read only
	}
	if !c.keep {
		sh.close()
		sh = nil
	}
	return sh, res, nil
}

func missingOr(path string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("capture: %s is listed in %s but missing; %s", path, ManifestName, damagedAdvice)
	}
	return fmt.Errorf("capture: %w", err)
}

// damagedAdvice says what to do about a shard that is not what was written.
const damagedAdvice = "restore it from a copy, or capture again"

func sizeError(path string, size, want int64) error {
	return fmt.Errorf("capture: %s is %d bytes, %s says %d: the file was truncated, modified or replaced; %s",
		path, size, ManifestName, want, damagedAdvice)
}

func checksumError(path, got, want string) error {
	return fmt.Errorf("capture: %s has SHA-256 %s, %s says %s: the file is corrupted or was modified; %s",
		path, got, ManifestName, want, damagedAdvice)
}

// checkFinite tests every stored state value for NaN and infinity on its raw bits and
// names the first one found (in batch, then column order) by shard row, sample id,
// position and column.
func (sh *shard) checkFinite() error {
	row := 0
	for _, b := range sh.batches {
		for c, st := range b.states {
			var i int
			if sh.dtype == Float16 {
				i = finite.F16(st)
			} else {
				i = finite.F32(st)
			}
			if i >= 0 {
				return sh.nonFinite(b, row, c, i)
			}
		}
		row += len(b.ids)
	}
	return nil
}

// nonFinite describes the non-finite value at element i of state column c of batch b,
// whose first row is the shard's row rowBase.
func (sh *shard) nonFinite(b *batch, rowBase, c, i int) error {
	H := sh.hidden
	r := i / H
	var kind string
	if sh.dtype == Float16 {
		kind = finite.Kind16(binary.LittleEndian.Uint16(b.states[c][2*i:]))
	} else {
		kind = finite.Kind32(binary.LittleEndian.Uint32(b.states[c][4*i:]))
	}
	return fmt.Errorf("capture: %s row %d (sample %d, position %d), column %s, element %d of %d: %s. "+
		"The file matches its checksum in %s, so the capture was stored this way: it holds a hidden state "+
		"that is not finite, which no drafter can train on; capture again (drafter refuses such states when it writes them)",
		sh.path, rowBase+r, b.ids[r], b.pos[r], sh.cols[c], i%H, H, kind, ManifestName)
}
