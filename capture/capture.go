package capture

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
)

// Writer writes a capture directory: shards plus a manifest kept up to date after every
// finished shard (see the package documentation for the protocol). It is not safe for
// concurrent use.
type Writer struct {
	dir string
	man *Manifest
	sw  *ShardWriter
}

// Create starts a new capture in dir (created if missing). dir must not already hold a
// manifest or shard files. m describes the capture: ModelFingerprint, Layers, FinalNorm,
// HiddenSize, DType, hashes, Generation, Seed and Args; the rest is maintained here.
// Create writes a manifest without shards before returning, so that an interrupted capture
// can be resumed.
func Create(dir string, m Manifest, opt ShardOptions) (*Writer, error) {
	man := m
	man.FormatVersion = FormatVersion
	man.Layers = append([]int(nil), m.Layers...)
	man.Columns = man.Layout().Columns()
	man.LayerConvention = LayerConvention
	man.Shards = nil
	man.Complete = false
	man.Args = copyArgs(m.Args)
	if err := man.Layout().Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("capture: create output directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("capture: list output directory: %w", err)
	}
	for _, e := range entries {
		if e.Name() == ManifestName || shardFileRe.MatchString(e.Name()) {
			return nil, fmt.Errorf("capture: %s already holds a capture (%s) without a manifest to resume it from: start over (distill and capture: --force) or choose another directory",
				dir, e.Name())
		}
	}
	if err := writeManifest(dir, &man); err != nil {
		return nil, err
	}
	return newWriter(dir, &man, opt, 0, nil)
}

func newWriter(dir string, man *Manifest, opt ShardOptions, first int, done map[int64]struct{}) (*Writer, error) {
	w := &Writer{dir: dir, man: man}
	user := opt.OnShard
	opt.FirstShard = first
	opt.OnShard = func(s ShardInfo) error {
		// Record the shard only after it has its final name (protocol step 3).
		w.man.Shards = append(w.man.Shards, s)
		if err := writeManifest(w.dir, w.man); err != nil {
			return err
		}
		if user != nil {
			return user(s)
		}
		return nil
	}
	sw, err := NewShardWriter(dir, man.Layout(), opt)
	if err != nil {
		return nil, err
	}
	sw.skipIDs(done)
	w.sw = sw
	return w, nil
}

// Dir returns the capture directory.
func (w *Writer) Dir() string { return w.dir }

// Layout returns the storage layout; Sample.States follows Layout().Columns().
func (w *Writer) Layout() Layout { return w.man.Layout() }

// Write appends one whole sample; see ShardWriter.Write.
func (w *Writer) Write(s Sample) error { return w.sw.Write(s) }

// Manifest returns a copy of the manifest as last written.
func (w *Writer) Manifest() *Manifest {
	m := *w.man
	m.Shards = append([]ShardInfo(nil), w.man.Shards...)
	m.Args = copyArgs(w.man.Args)
	return &m
}

// Close finishes the last shard, marks the capture complete and writes the final manifest.
func (w *Writer) Close() (*Manifest, error) {
	if _, err := w.sw.Close(); err != nil {
		return nil, err
	}
	w.man.Complete = true
	if err := writeManifest(w.dir, w.man); err != nil {
		return nil, err
	}
	return w.Manifest(), nil
}

// Abort stops the capture without finishing the current shard; its temporary file is
// deleted. Finished shards stay listed, so the capture can be resumed.
func (w *Writer) Abort() { w.sw.Abort() }

var (
	shardFileRe = regexp.MustCompile(`^shard-([0-9]{5,})\.arrow$`)
	tmpFileRe   = regexp.MustCompile(`^(shard-[0-9]{5,}\.arrow|manifest\.json)\.tmp$`)
)

// ResumeState is what OpenForResume found in a capture directory.
type ResumeState struct {
	// Dir is the capture directory.
	Dir string
	// Manifest is the manifest as read (listing only verified shards).
	Manifest *Manifest
	// Done holds the ids of the samples already stored; skip them.
	Done map[int64]struct{}
	// NextShard is the number the next shard will get.
	NextShard int
	// Removed lists the files deleted: leftover temporary files and shards not listed in
	// the manifest (their samples are not in Done and must be generated again).
	Removed []string
}

// IsDone reports whether sample id is already stored.
func (r *ResumeState) IsDone(id int64) bool {
	_, ok := r.Done[id]
	return ok
}

// OpenForResume prepares to continue the capture in dir. It refuses when expectedArgs
// differ from the arguments recorded in the manifest, listing every difference. It deletes
// leftover temporary files and shard files that the manifest does not list, verifies every
// listed shard as Verify does (an error names the first bad file), and returns
// the ids of the samples already stored. Call Writer on the result to continue.
func OpenForResume(dir string, expectedArgs map[string]string) (*ResumeState, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if err := compareArgs(dir, m.Args, expectedArgs); err != nil {
		return nil, err
	}
	listed := map[string]bool{}
	next := 0
	for _, s := range m.Shards {
		listed[s.File] = true
		if s.Index+1 > next {
			next = s.Index + 1
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("capture: list %s: %w", dir, err)
	}
	var removed []string
	for _, e := range entries {
		name := e.Name()
		stray := tmpFileRe.MatchString(name)
		if shardFileRe.MatchString(name) && !listed[name] {
			stray = true
		}
		if !stray || e.IsDir() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("capture: remove unfinished file: %w", err)
		}
		removed = append(removed, name)
	}
	if len(removed) > 0 {
		if err := atomicfile.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
	}
	if _, _, err := openShards(shardRefs(dir, m), checks{verify: true}); err != nil {
		return nil, err
	}
	done := map[int64]struct{}{}
	for _, s := range m.Shards {
		sh, err := openShard(dir, s, m.Layout())
		if err != nil {
			return nil, err
		}
		err = sh.sampleIDs(func(id int64) error {
			if _, dup := done[id]; dup {
				return fmt.Errorf("capture: sample id %d appears twice in %s (second time in %s)", id, dir, s.File)
			}
			done[id] = struct{}{}
			return nil
		})
		sh.close()
		if err != nil {
			return nil, err
		}
	}
	return &ResumeState{Dir: dir, Manifest: m, Done: done, NextShard: next, Removed: removed}, nil
}

// Writer continues the capture: new samples go to shards numbered from NextShard, and
// writing a sample id that is already done is refused.
func (r *ResumeState) Writer(opt ShardOptions) (*Writer, error) {
	m := *r.Manifest
	m.Shards = append([]ShardInfo(nil), r.Manifest.Shards...)
	m.Args = copyArgs(r.Manifest.Args)
	m.Complete = false
	if err := writeManifest(r.Dir, &m); err != nil {
		return nil, err
	}
	return newWriter(r.Dir, &m, opt, r.NextShard, r.Done)
}

// compareArgs returns an error listing every argument whose value differs between the
// manifest and the new run. Another model fingerprint gets its own plain error: the
// samples would come from two checkpoints.
func compareArgs(dir string, old, cur map[string]string) error {
	if was, now := old[argFingerprint], cur[argFingerprint]; was != now {
		return fmt.Errorf("capture: cannot resume the capture in %s: it was made from another checkpoint "+
			"(model fingerprint %s) than the model given now (fingerprint %s), and one capture must not mix samples of two models; "+
			"rerun with --model set to the checkpoint it was started with, or capture into a new directory",
			dir, orNone(was), orNone(now))
	}
	keys := map[string]bool{}
	for k := range old {
		keys[k] = true
	}
	for k := range cur {
		keys[k] = true
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	var diffs []string
	for _, k := range names {
		ov, ook := old[k]
		nv, nok := cur[k]
		if ook == nok && ov == nv {
			continue
		}
		diffs = append(diffs, fmt.Sprintf("  %s: was %s, now %s", k, argValue(ov, ook), argValue(nv, nok)))
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("capture: cannot resume the capture in %s: %d argument(s) differ from the ones it was started with, "+
		"and mixing samples made with different settings would corrupt the dataset:\n%s\n"+
		"rerun with the original arguments, or capture into a new directory",
		dir, len(diffs), strings.Join(diffs, "\n"))
}

// argFingerprint is the argument recording the model fingerprint.
const argFingerprint = "model_fingerprint"

func orNone(v string) string {
	if v == "" {
		return "(none recorded)"
	}
	return v
}

func argValue(v string, ok bool) string {
	if !ok {
		return "(not set)"
	}
	return strconv.Quote(v)
}

func copyArgs(a map[string]string) map[string]string {
	if a == nil {
		return map[string]string{}
	}
	out := make(map[string]string, len(a))
	for k, v := range a {
		out[k] = v
	}
	return out
}
