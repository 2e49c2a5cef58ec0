// Package filecache remembers results computed from a file's bytes (a digest,
// a verification) so that a later run can skip reading an unchanged file again.
//
// An entry is keyed by the file's absolute path and a kind, and is valid only
// while the file keeps its identity: device, inode, size, modification time
// and status-change time. Writing a file, replacing it, or copying another
// file over it with its times preserved (cp -p, rsync -t) changes the inode or
// the change time, which nobody can set, so a cached result is never served
// for other bytes than the ones it was computed from.
//
// The cache is an optimisation only: an unreadable, corrupt or unwritable
// cache behaves as an empty one, and a nil *Cache caches nothing.
package filecache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
)

// EnvDir names the environment variable that overrides the cache folder; the
// command reads it (see Dir).
const EnvDir = "DRAFTER_CACHE_DIR"

// Identity is what makes a cached result valid for a file.
type Identity struct {
	// Path is the file's absolute path.
	Path string `json:"path"`
	// Dev, Ino, Size, ModNs and ChangeNs are the file's device, inode, size
	// in bytes, and modification and status-change times in nanoseconds.
	Dev      uint64 `json:"dev"`
	Ino      uint64 `json:"ino"`
	Size     int64  `json:"size"`
	ModNs    int64  `json:"mod_ns"`
	ChangeNs int64  `json:"change_ns"`
}

// Stat returns the identity of the file at path. Take it before reading the
// file and compare it with one taken after (Same) before storing a result: a
// file written while it was read must not be cached.
func Stat(path string) (Identity, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Identity{}, fmt.Errorf("filecache: %w", err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return Identity{}, err
	}
	return Identify(abs, st)
}

// Identify returns the identity of the file at path described by st, a status
// taken earlier. Pass the status of an open file ((*os.File).Stat) to describe
// the bytes that were opened even when the path has been replaced since: Get
// then serves only a result computed from those bytes, and Put, which compares
// with a fresh Stat of the path, stores nothing.
func Identify(path string, st os.FileInfo) (Identity, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Identity{}, fmt.Errorf("filecache: %w", err)
	}
	id := Identity{Path: abs, Size: st.Size(), ModNs: st.ModTime().UnixNano()}
	sysIdentity(st, &id)
	return id, nil
}

// Cache is a folder of cached results. Its methods are safe for concurrent
// use, also by several processes: entries are replaced atomically.
type Cache struct {
	dir string
}

// New returns a cache kept in dir, or nil (no caching) when dir is "".
func New(dir string) *Cache {
	if dir == "" {
		return nil
	}
	return &Cache{dir: dir}
}

// Dir returns the folder drafter caches in: override when it is not empty
// (the command passes $DRAFTER_CACHE_DIR), else drafter/ in the user's cache
// folder ($XDG_CACHE_HOME or ~/.cache on Linux), else "" (no caching).
func Dir(override string) string {
	if override != "" {
		return override
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(base, "drafter")
}

// entry is one cached result on disk.
type entry struct {
	Kind     string          `json:"kind"`
	Identity Identity        `json:"identity"`
	Value    json.RawMessage `json:"value"`
}

// file returns where the entry for (kind, path) lives.
func (c *Cache) file(kind, path string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + path))
	return filepath.Join(c.dir, kind, hex.EncodeToString(sum[:16])+".json")
}

// Get decodes into v the result stored for kind and the file id describes,
// and reports whether there was one for exactly that identity.
func (c *Cache) Get(kind string, id Identity, v any) bool {
	if c == nil {
		return false
	}
	b, err := os.ReadFile(c.file(kind, id.Path))
	if err != nil {
		return false
	}
	var e entry
	if json.Unmarshal(b, &e) != nil || e.Kind != kind || e.Identity != id {
		return false
	}
	return json.Unmarshal(e.Value, v) == nil
}

// Put stores v as the result for kind and the file id describes, replacing
// any earlier one. before is the identity taken before the file was read: if
// the file changed since (id differs from a fresh Stat, or from before),
// nothing is stored. Errors are returned for callers that want to report
// them; losing a cache entry is never fatal.
func (c *Cache) Put(kind string, before Identity, v any) error {
	if c == nil {
		return nil
	}
	now, err := Stat(before.Path)
	if err != nil {
		return err
	}
	if now != before {
		return fmt.Errorf("filecache: %s changed while it was read; not cached", before.Path)
	}
	val, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("filecache: %w", err)
	}
	b, err := json.Marshal(entry{Kind: kind, Identity: before, Value: val})
	if err != nil {
		return fmt.Errorf("filecache: %w", err)
	}
	path := c.file(kind, before.Path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("filecache: %w", err)
	}
	return atomicfile.WriteFile(path, b)
}
