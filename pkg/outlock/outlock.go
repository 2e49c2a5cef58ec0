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
// that process still runs. A lock file there that names no process (empty,
// or not a record drafter writes) is reported with the file to delete, never
// taken over: see acquireByRecord.
package outlock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
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

// names reports whether the record names a process drafter could have
// written it for: a positive process id that fits the system's pid_t (0 and
// negative ids mean process groups or every process to kill(2), and would
// read as "alive") on a named host.
func (o Owner) names() bool {
	return o.PID > 0 && o.PID <= math.MaxInt32 && o.Host != ""
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
	// NoOwner is set when the filesystem offers no locks and the lock file
	// names no process (it is empty, or not a record drafter writes) even
	// after a just-started holder had time to write it: nothing can tell
	// whether a run still writes into the folder, and the file has to be
	// deleted by hand.
	NoOwner bool
	// Record is the start of the lock file's content when NoOwner is set.
	Record string
}

// recordShown is how much of a record that names no process a BusyError
// quotes: enough to recognise it, not a whole file dumped into a message.
const recordShown = 64

// Error says who holds the folder and what to do about it.
func (e *BusyError) Error() string {
	if e.NoOwner {
		what := "is empty"
		if e.Record != "" {
			what = fmt.Sprintf("holds %q, not a lock record of drafter", e.Record)
		}
		return fmt.Sprintf("%s is locked by %s, which names no process (it %s), and this filesystem offers no file locks, "+
			"so whether another run still writes into %s cannot be checked: if none does (the file was left by a run that "+
			"ended before recording itself, or written by something else), delete %s and run again, or use another --out",
			e.Dir, e.Path, what, e.Dir, e.Path)
	}
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
	_, o, err := awaitRecord(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if !o.names() {
		o = Owner{}
	}
	return &BusyError{Dir: filepath.Dir(path), Path: path, Owner: o, Unverifiable: unverifiable}
}

// awaitRecord reads the lock file until it names a process, for at most
// about 200 ms: a holder writes its record right after creating the file,
// so one that has just started gets the time to do so. It returns the last
// read (an error, or a record that may still name no process), and
// fs.ErrNotExist as soon as the file is gone.
func awaitRecord(path string) ([]byte, Owner, error) {
	var (
		raw []byte
		o   Owner
		err error
	)
	for i := 0; i < 200; i++ {
		raw, o, err = readOwner(path)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && o.names()) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return raw, o, err
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
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&o); err != nil {
		return b, Owner{}, fmt.Errorf("%w: %w", errNoRecord, err)
	}
	return b, o, nil
}

// errNoRecord marks a lock file whose content is not a record (empty, or not
// JSON of an Owner), as opposed to one that cannot be read.
var errNoRecord = errors.New("not a lock record")

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
		raw, o, err := awaitRecord(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil && !errors.Is(err, errNoRecord) {
			return nil, fmt.Errorf("outlock: reading %s: %w", path, err)
		}
		if err != nil || !o.names() {
			// Not taken over, though no process is named: without kernel
			// locks nothing ties this file to a process, and "provably
			// stale" cannot be shown. A holder on another host may have
			// created it and not yet written its record (a network
			// filesystem can show the creation well before the write), and
			// its mtime cannot date it across hosts' clocks. Taking it over
			// then would put two runs in one folder, which corrupts the
			// output silently; refusing costs the user one rm, which the
			// message names.
			return nil, &BusyError{Dir: filepath.Dir(path), Path: path, NoOwner: true, Record: shownRecord(raw)}
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

// shownRecord is the part of a lock file's content a BusyError quotes.
func shownRecord(raw []byte) string {
	if len(raw) > recordShown {
		raw = raw[:recordShown]
	}
	return string(raw)
}
