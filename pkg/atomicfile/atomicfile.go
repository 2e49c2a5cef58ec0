// Package atomicfile writes files so that readers and crashes never see them
// half-written: the content goes to a temporary file in the same directory, is
// synced, and is renamed over the destination; then the directory is synced so
// the rename itself survives a power cut. Write takes the whole content at
// once; Create streams it (capture's shards, written batch by batch).
package atomicfile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Options says how Create names the temporary file and how strictly it
// syncs the directory.
type Options struct {
	// Temp is the temporary file's name in the destination's directory. ""
	// picks a new unique name (".NAME.tmp-*"); a fixed name (capture's
	// "shard-00000.arrow.tmp") lets a later run recognise and delete what a
	// killed writer left, and is truncated if it exists.
	Temp string
	// StrictDirSync makes a failure to fsync the directory after the rename
	// an error. By default it is ignored, since some filesystems refuse to
	// sync a directory; capture requires it, because its manifest may only
	// list a shard whose rename is durable.
	StrictDirSync bool
}

// File is a file being written atomically: Write into it, then Commit to
// give it its final name, or Abort to leave the destination as it was.
type File struct {
	f         *os.File
	bw        *bufio.Writer
	path, tmp string
	opt       Options
	n         int64
	done      bool
}

// Create starts writing path atomically: the bytes go to a temporary file
// in path's directory, buffered, until Commit.
func Create(path string, opt Options) (*File, error) {
	dir := filepath.Dir(path)
	var f *os.File
	var err error
	if opt.Temp == "" {
		// CreateTemp makes the file 0600; Commit opens it up as any file.
		f, err = os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	} else {
		f, err = os.OpenFile(filepath.Join(dir, opt.Temp), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	return &File{f: f, bw: bufio.NewWriterSize(f, 1<<20), path: path, tmp: f.Name(), opt: opt}, nil
}

// Write appends p to the temporary file.
func (a *File) Write(p []byte) (int, error) {
	n, err := a.bw.Write(p)
	a.n += int64(n)
	return n, err
}

// Flush writes the buffered bytes to the temporary file (without syncing
// it): what a process killed now would leave there.
func (a *File) Flush() error { return a.bw.Flush() }

// TempName returns the temporary file's path.
func (a *File) TempName() string { return a.tmp }

// Size returns the bytes written so far.
func (a *File) Size() int64 { return a.n }

// Commit flushes and fsyncs the temporary file, checks that it holds every
// byte written (a filesystem that lost some must not get the final name),
// renames it to the destination and fsyncs the directory. On an error
// before the rename the temporary file is removed and the destination is
// left as it was.
func (a *File) Commit() (err error) {
	if a.done {
		return fmt.Errorf("writing %s: already committed or aborted", a.path)
	}
	a.done = true
	defer func() {
		if err != nil {
			err = fmt.Errorf("writing %s: %w", a.path, err)
		}
	}()
	if err := a.finish(); err != nil {
		a.f.Close()
		os.Remove(a.tmp)
		return err
	}
	if err := os.Rename(a.tmp, a.path); err != nil {
		os.Remove(a.tmp)
		return err
	}
	if err := SyncDir(filepath.Dir(a.path)); err != nil && a.opt.StrictDirSync {
		return err // the file is in place; only its rename may not be durable
	}
	return nil
}

// finish flushes, syncs and closes the temporary file, and checks that it
// holds every byte written.
func (a *File) finish() error {
	if err := a.bw.Flush(); err != nil {
		return err
	}
	if a.opt.Temp == "" {
		if err := a.f.Chmod(0o644); err != nil {
			return err
		}
	}
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", a.tmp, err)
	}
	st, err := a.f.Stat()
	if err != nil {
		return err
	}
	if err := a.f.Close(); err != nil {
		return err
	}
	if st.Size() != a.n {
		return fmt.Errorf("%s holds %d bytes, but %d were written", a.tmp, st.Size(), a.n)
	}
	return nil
}

// Abort closes and removes the temporary file; the destination stays as it
// was. It is safe to call after Commit (it does nothing then).
func (a *File) Abort() {
	if a.done {
		return
	}
	a.done = true
	a.f.Close()
	os.Remove(a.tmp)
}

// Write creates path atomically with the bytes fill writes. On any error the
// destination is left as it was and the temporary file is removed.
func Write(path string, fill func(w io.Writer) error) error {
	a, err := Create(path, Options{})
	if err != nil {
		return err
	}
	if err := fill(a); err != nil {
		a.Abort()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return a.Commit()
}

// WriteFile creates path atomically with data.
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteJSON creates path atomically with v encoded as indented JSON and a final
// newline.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return WriteFile(path, append(b, '\n'))
}

// SyncDir fsyncs a directory so that renames and creations inside it are
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening directory %s to fsync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}
