// Package outlock gives one process at a time a folder to write into.
//
// Acquire takes the lock file .drafter.lock in the folder and records in it
// who holds it (process id, host, command, start time), so that a second
// run is refused with a message naming the first.
//
// Where the system offers flock(2), the lock is the kernel's: it ends with
// the process however the process ends, so a file left by a crashed or
// killed run never blocks the next one (its record is simply overwritten).
// Where it does not (some network filesystems refuse flock, and systems
// without it), the file's existence is the lock: a record of a process of
// this host that no longer runs is taken over, and a record of another host
// is reported with how to remove it, since this host cannot tell whether
// that process still runs.
package outlock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// FileName is the lock file's name inside the folder.
const FileName = ".drafter.lock"

// Owner is what the lock file records about the process holding it.
type Owner struct {
	// PID is the process id, Host the host name.
	PID  int    `json:"pid"`
	Host string `json:"host"`
	// Command says what the process does (for example "drafter train").
	Command string `json:"command"`
	// Started is when it took the lock.
	Started time.Time `json:"started"`
}

func (o Owner) same(p Owner) bool {
	return o.PID == p.PID && o.Host == p.Host && o.Command == p.Command && o.Started.Equal(p.Started)
}

// samePath reports whether path still names the open file f.
func samePath(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// Lock is a held folder lock.
type Lock struct {
	path  string
	owner Owner
	// f holds the kernel lock; nil when the file's existence is the lock.
	f *os.File
	// made is the folder Acquire created, removed again on Release when
	// nothing else was written into it.
	made     string
	released bool
}

// BusyError reports a folder another process holds.
type BusyError struct {
	// Dir is the folder and Path its lock file.
	Dir, Path string
	// Owner is the holder's record; zero when it has not written one yet
	// (it is just starting) or it cannot be read.
	Owner Owner
	// Unverifiable is set when the filesystem offers no locks and the
	// holder runs on another host: nothing here can tell whether it still
	// runs.
	Unverifiable bool
}

func (e *BusyError) Error() string {
	who := "another drafter process (which has not recorded itself yet, or whose record in " + e.Path + " is unreadable)"
	if e.Owner.PID != 0 {
		who = fmt.Sprintf("%q (pid %d on host %s, started %s)", e.Owner.Command, e.Owner.PID, e.Owner.Host,
			e.Owner.Started.Local().Format("2006-01-02 15:04:05 MST"))
	}
	msg := fmt.Sprintf("%s is in use by %s: wait for it to finish, or use another --out", e.Dir, who)
	if e.Unverifiable {
		msg += fmt.Sprintf("; this filesystem offers no file locks, so whether that process still runs cannot be checked from this host: if you know it has ended, delete %s", e.Path)
	}
	return msg
}

// Acquire creates dir if needed and takes its lock for the calling process,
// recording what (the command, for example "drafter train") with the
// process id, host name and time. A folder another process holds gives a
// *BusyError. Release the lock when done.
func Acquire(dir, what string) (*Lock, error) {
	made := ""
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		made = dir
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("outlock: creating %s: %w", dir, err)
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	me := Owner{PID: os.Getpid(), Host: host, Command: what, Started: time.Now().UTC().Truncate(time.Second)}
	l, err := acquire(filepath.Join(dir, FileName), me)
	if err != nil {
		if made != "" {
			os.Remove(made) // only succeeds while it is empty
		}
		return nil, err
	}
	l.made = made
	return l, nil
}

// Release gives the folder back: it deletes the lock file (while still
// holding the lock, so that no other process takes a lock on a file about
// to disappear) and then drops the lock. A folder Acquire created is
// removed too when nothing else was written into it. Release may be called
// more than once.
func (l *Lock) Release() error {
	if l == nil || l.released {
		return nil
	}
	l.released = true
	var err error
	if l.f != nil {
		if samePath(l.f, l.path) { // not deleted by hand and replaced by another run's
			err = os.Remove(l.path)
		}
		if cerr := l.f.Close(); err == nil {
			err = cerr
		}
	} else if _, o, rerr := readOwner(l.path); rerr == nil && o.same(l.owner) {
		// Without kernel locks, remove only our own record.
		err = os.Remove(l.path)
	}
	if l.made != "" {
		os.Remove(l.made)
	}
	if err != nil {
		return fmt.Errorf("outlock: releasing %s: %w", l.path, err)
	}
	return nil
}

// Path returns the lock file's path.
func (l *Lock) Path() string { return l.path }

// busy builds the error for a lock file held by another process, reading
// its record (giving a just-started holder a moment to write it). It returns
// nil when the file is gone: the holder released it, try again.
func busy(path string, unverifiable bool) error {
	var o Owner
	for i := 0; i < 200; i++ {
		var err error
		_, o, err = readOwner(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && o.PID != 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return &BusyError{Dir: filepath.Dir(path), Path: path, Owner: o, Unverifiable: unverifiable}
}

// readOwner returns the lock file's bytes and the record they hold: the
// first JSON value, so that a record being replaced by a shorter one (see
// writeOwner) still reads as one of the two.
func readOwner(path string) ([]byte, Owner, error) {
	var o Owner
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, o, err
	}
	err = json.NewDecoder(bytes.NewReader(b)).Decode(&o)
	return b, o, err
}

// writeOwner replaces f's content with o's record: written over the old one,
// then cut to length, so that a reader never finds the file empty.
func writeOwner(f *os.File, o Owner) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	// No fsync: after a machine crash no process holds the folder anyway.
	return f.Truncate(int64(len(b)))
}

// acquireByRecord takes the lock where the file's existence is the lock:
// creating it exclusively takes it. An existing record of this host's
// process that no longer runs is stale and taken over; any other is busy.
func acquireByRecord(path string, me Owner) (*Lock, error) {
	for attempt := 0; attempt < 3; attempt++ {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			werr := writeOwner(f, me)
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				os.Remove(path)
				return nil, fmt.Errorf("outlock: writing %s: %w", path, werr)
			}
			return &Lock{path: path, owner: me}, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("outlock: creating %s: %w", path, err)
		}
		raw, o, err := readOwner(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil || o.PID == 0 {
			if err := busy(path, false); err != nil {
				return nil, err
			}
			continue
		}
		if o.Host != me.Host {
			return nil, &BusyError{Dir: filepath.Dir(path), Path: path, Owner: o, Unverifiable: true}
		}
		if o.PID == me.PID || processAlive(o.PID) {
			return nil, &BusyError{Dir: filepath.Dir(path), Path: path, Owner: o}
		}
		// Stale: remove it unless another process took it over meanwhile.
		if now, err := os.ReadFile(path); err == nil && bytes.Equal(now, raw) {
			os.Remove(path)
		}
	}
	return nil, fmt.Errorf("outlock: %s keeps changing: several processes are taking over a stale lock at once; try again", path)
}
