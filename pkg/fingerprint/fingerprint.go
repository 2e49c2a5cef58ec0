// Package fingerprint identifies a model checkpoint by everything that decides
// what it computes and how it is prompted: its configuration, every byte of
// every tensor, its tokenizer and its chat template. Drafters record the
// fingerprint of the target they were trained for and captures the one they
// were made from; eval, train and distill refuse a model whose fingerprint
// differs. Of is the one function that computes it.
//
// Hashing every weight reads the whole checkpoint, so tensors are hashed in
// parallel in fixed-size chunks, and the digests of each safetensors file can
// be kept in a filecache.Cache so that the next run over an unchanged file
// reads none of its bytes.
package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drafter-ai/drafter/pkg/chat"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// version starts the hashed stream, so that a change of what is hashed, or
// how, changes every fingerprint.
const version = "drafter checkpoint fingerprint v2\n"

// ChunkSize is the length of the pieces a tensor's bytes are hashed in: the
// pieces of one large tensor (an embedding) are hashed on several cores.
const ChunkSize = 16 << 20

// Cache kinds (filecache): the tensor digests of one safetensors file, and
// the digest of a canonicalised JSON file.
const (
	tensorKind    = "tensor-digests-v2"
	tokenizerKind = "tokenizer-json-digest-v2"
)

// Result is a fingerprint and how it was obtained.
type Result struct {
	// Fingerprint is the lowercase hex SHA-256 identifying the model.
	Fingerprint string
	// Tokenizer is the hex SHA-256 of tokenizer.json as canonical JSON, ""
	// when the folder has none.
	Tokenizer string
	// Stats say how much was read and how fast.
	Stats Stats
}

// Stats say how a fingerprint was obtained.
type Stats struct {
	// Tensors is the number of tensors; TensorBytes their total size.
	Tensors     int   `json:"tensors"`
	TensorBytes int64 `json:"tensor_bytes"`
	// HashedBytes are the tensor bytes read and hashed; the digests of the
	// other TensorBytes-HashedBytes came from the cache.
	HashedBytes int64 `json:"hashed_bytes"`
	// Seconds is the time the whole fingerprint took.
	Seconds float64 `json:"seconds"`
	// GBPerSecond is HashedBytes/Seconds in units of 1e9 bytes (0 when
	// nothing was hashed).
	GBPerSecond float64 `json:"gb_per_second"`
	// FromCache is true when every tensor digest came from the cache.
	FromCache bool `json:"from_cache"`
}

// String says how the fingerprint was obtained, for people.
func (s Stats) String() string {
	took := time.Duration(s.Seconds * float64(time.Second)).Round(100 * time.Microsecond)
	switch {
	case s.FromCache:
		return fmt.Sprintf("from cache: %d tensors, %s not read again (%v)", s.Tensors, ByteSize(s.TensorBytes), took)
	case s.HashedBytes < s.TensorBytes:
		return fmt.Sprintf("hashed %s of %s of tensors in %v (%.2f GB/s), the rest from cache", ByteSize(s.HashedBytes), ByteSize(s.TensorBytes), took, s.GBPerSecond)
	}
	return fmt.Sprintf("hashed %d tensors, %s, in %v (%.2f GB/s)", s.Tensors, ByteSize(s.HashedBytes), took, s.GBPerSecond)
}

// ByteSize writes n bytes in decimal units ("2.20 GB", "518.67 kB"), as the
// statistics of a fingerprinting and drafter inspect print sizes.
func ByteSize(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.2f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Of fingerprints the opened checkpoint ck. The fingerprint is the hex SHA-256
// of this stream:
//
//   - the line "drafter checkpoint fingerprint v2";
//   - "config" and the canonical configuration (checkpoint.Config.Canonical:
//     one "key=value" line per parsed field, so JSON formatting and unknown
//     keys do not matter);
//   - one line `tensor "NAME" DTYPE [SHAPE] DIGEST` per tensor of the weights
//     (the name quoted as Go's %q does), sorted by name, where DIGEST is the
//     hex SHA-256 of the concatenated
//     SHA-256 digests of the tensor's bytes in ChunkSize pieces;
//   - "tokenizer.json D", D the hex SHA-256 of tokenizer.json decoded and
//     re-encoded as canonical JSON (sorted keys, no spacing, numbers other
//     than integers in shortest round-trip form), or "none" when the folder
//     has no tokenizer.json;
//   - "tokenizer_config.json D", the same for tokenizer_config.json without
//     its chat_template key (the template is the next line), or "none";
//   - "chat_template D", D chat.Sources.Hash of the template the chat
//     package finds (template names and sources, special tokens), or "none".
//
// It depends neither on the folder nor on how the tensors are split into
// safetensors files; a model with no tokenizer files has "none" in their place.
// cache, when not nil, holds each safetensors file's tensor digests (and
// tokenizer.json's), keyed by the file's identity; an unchanged file is then
// not read again.
func Of(ck *checkpoint.Checkpoint, cache *filecache.Cache) (*Result, error) {
	start := time.Now()
	digests, res, err := tensorDigests(ck.Weights, cache)
	if err != nil {
		return nil, fmt.Errorf("fingerprint of %s: %w", ck.Dir, err)
	}
	h := sha256.New()
	h.Write([]byte(version))
	h.Write([]byte("config\n"))
	h.Write(ck.Config.Canonical())
	for _, name := range ck.Weights.Names() {
		in, _ := ck.Weights.Info(name)
		d := digests[name]
		fmt.Fprintf(h, "tensor %q %s %s %s\n", name, in.DType, safetensors.ShapeString(in.Shape), hex.EncodeToString(d[:]))
	}
	if res.Tokenizer, err = prompting(h, ck.Dir, cache); err != nil {
		return nil, fmt.Errorf("fingerprint of %s: %w", ck.Dir, err)
	}
	res.Fingerprint = hex.EncodeToString(h.Sum(nil))
	st := &res.Stats
	st.Seconds = time.Since(start).Seconds()
	st.FromCache = st.HashedBytes == 0 && st.Tensors > 0
	if st.HashedBytes > 0 && st.Seconds > 0 {
		st.GBPerSecond = float64(st.HashedBytes) / st.Seconds / 1e9
	}
	return res, nil
}

// prompting hashes what turns a conversation into token ids: the tokenizer
// files and the chat template. It returns tokenizer.json's digest.
func prompting(h hash.Hash, dir string, cache *filecache.Cache) (string, error) {
	tok, err := jsonDigest(dir, "tokenizer.json", "", cache, tokenizerKind)
	if err != nil {
		return "", err
	}
	cfg, err := jsonDigest(dir, "tokenizer_config.json", "chat_template", nil, "")
	if err != nil {
		return "", err
	}
	tmpl := "none"
	src, err := chat.ReadSources(dir)
	if err != nil {
		return "", err
	}
	if src != nil {
		tmpl = src.Hash()
	}
	fmt.Fprintf(h, "tokenizer.json %s\ntokenizer_config.json %s\nchat_template %s\n", orNone(tok), orNone(cfg), tmpl)
	return tok, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// digest is a SHA-256 sum.
type digest = [sha256.Size]byte

// fileDigests is the cached value for one safetensors file: the digest of
// each of its tensors, by name.
type fileDigests struct {
	Tensors map[string]string `json:"tensors"`
}

// tensorDigests returns the digest of every tensor of w: from the cache for
// files whose identity it knows, else by hashing (all files' tensors
// together, in parallel). Digests of hashed files are stored in the cache.
func tensorDigests(w *safetensors.Set, cache *filecache.Cache) (map[string]digest, *Result, error) {
	res := &Result{Stats: Stats{Tensors: w.Len()}}
	out := make(map[string]digest, w.Len())
	files := w.Files()
	stats := w.FileStats()
	byFile := make(map[string][]string, len(files))
	for _, name := range w.Names() {
		in, _ := w.Info(name)
		byFile[in.File] = append(byFile[in.File], name)
		res.Stats.TensorBytes += in.Size
	}
	var missed []string
	ids := make([]filecache.Identity, len(files))
	hit := make([]bool, len(files))
	for i, f := range files {
		id, err := filecache.Identify(f, stats[i])
		if err != nil {
			return nil, nil, err
		}
		ids[i] = id
		var fd fileDigests
		if cache.Get(tensorKind, id, &fd) && decodeAll(byFile[f], fd.Tensors, out) {
			hit[i] = true
			continue
		}
		missed = append(missed, byFile[f]...)
	}
	sums, hashed, err := hashTensors(w, missed)
	if err != nil {
		return nil, nil, err
	}
	res.Stats.HashedBytes = hashed
	for i, name := range missed {
		out[name] = sums[i]
	}
	for i, f := range files {
		if hit[i] {
			continue
		}
		fd := fileDigests{Tensors: make(map[string]string, len(byFile[f]))}
		for _, name := range byFile[f] {
			d := out[name]
			fd.Tensors[name] = hex.EncodeToString(d[:])
		}
		// Losing a cache entry only costs the next run a rehash.
		_ = cache.Put(tensorKind, ids[i], fd)
	}
	return out, res, nil
}

// decodeAll copies the cached digests of names into out and reports whether
// every name had a well-formed one.
func decodeAll(names []string, cached map[string]string, out map[string]digest) bool {
	for _, name := range names {
		var d digest
		b, err := hex.DecodeString(cached[name])
		if err != nil || len(b) != len(d) {
			return false
		}
		copy(d[:], b)
		out[name] = d
	}
	return true
}

// hashTensors returns the digest of each named tensor and the bytes hashed.
// The tensors are cut into ChunkSize pieces hashed by one worker per CPU the
// process may use (GOMAXPROCS: every core unless limited); a tensor's digest
// is the SHA-256 of its pieces' digests in order.
func hashTensors(w *safetensors.Set, names []string) ([]digest, int64, error) {
	type piece struct {
		sum *digest
		b   []byte
	}
	pieceSums := make([][]digest, len(names))
	var pieces []piece
	var total int64
	for i, name := range names {
		b, _, err := w.Raw(name)
		if err != nil {
			return nil, 0, err
		}
		total += int64(len(b))
		pieceSums[i] = make([]digest, (len(b)+ChunkSize-1)/ChunkSize)
		for k := range pieceSums[i] {
			pieces = append(pieces, piece{&pieceSums[i][k], b[k*ChunkSize : min((k+1)*ChunkSize, len(b))]})
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(pieces)) {
		wg.Go(func() {
			for {
				j := next.Add(1) - 1
				if j >= int64(len(pieces)) {
					return
				}
				*pieces[j].sum = sha256.Sum256(pieces[j].b)
			}
		})
	}
	wg.Wait()
	out := make([]digest, len(names))
	h := sha256.New()
	for i, sums := range pieceSums {
		h.Reset()
		for _, s := range sums {
			h.Write(s[:])
		}
		h.Sum(out[i][:0])
	}
	return out, total, nil
}
