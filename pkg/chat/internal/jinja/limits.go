package jinja

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// The limits of one rendering. A chat template comes with the checkpoint: it
// is code we run, and Jinja lets it loop (range, macros that call themselves)
// and build values (concatenation, join, replace) without bound. Upstream
// the engine has no limit at all, and a template that recurses overflows the
// Go stack (a fatal error no code can recover from) while one that doubles a
// string runs the machine out of memory. These bounds stop such a template
// with an error long before, and sit far above what any real chat template
// needs (a conversation of thousands of turns takes a few hundred thousand
// steps and its own size in output).
//
// The limits count work, not time, so that whether a rendering succeeds
// never depends on the machine or its load: the same template and input fail
// or pass alike everywhere.
const (
	// MaxSteps bounds the steps of one rendering: every statement and
	// expression evaluated, every element a builtin, comparison, repr or
	// JSON encoding visits, and iterationSteps per loop iteration: a few
	// seconds of work at most.
	MaxSteps = 4_000_000
	// MaxBytes bounds the output and every string value. A prompt longer
	// than any model's context (a million tokens are about 4 MB of text)
	// fails anyway; MaxBytes is 16 times that.
	MaxBytes = 64 << 20
	// MaxWorkBytes bounds the bytes of all the strings one rendering
	// builds or reads, so that a loop that copies a large string again
	// and again stops too.
	MaxWorkBytes = 1 << 30
	// MaxItems bounds the items of a list or dict value (a range, a split:
	// a million-token text has fewer words).
	MaxItems = 2 << 20
	// MaxCallDepth bounds nested macro and caller() calls.
	MaxCallDepth = 256
	// MaxNesting bounds the nesting of lists and dicts that printing,
	// comparing and encoding walk (a list that holds itself nests without
	// end).
	MaxNesting = 512
)

// iterationSteps is what one loop iteration costs in steps: setting the
// loop variables takes about as long as ten expressions.
const iterationSteps = 10

// The errors a rendering stopped by a limit wraps (see LimitError).
var (
	// ErrSteps: the template ran more than MaxSteps steps or built more
	// than MaxWorkBytes bytes of text: it loops without end, or nearly.
	ErrSteps = errors.New("too many steps")
	// ErrSize: the output or a value would exceed MaxBytes bytes or
	// MaxItems items: the template grows without bound.
	ErrSize = errors.New("too large")
	// ErrDepth: calls nest deeper than MaxCallDepth or values deeper than
	// MaxNesting: the template recurses without end.
	ErrDepth = errors.New("too deep")
)

// LimitError is a rendering stopped by one of the limits.
type LimitError struct {
	// Kind is ErrSteps, ErrSize or ErrDepth; What says which limit.
	Kind error
	What string
}

// Error says which limit the template reached.
func (e *LimitError) Error() string {
	return fmt.Sprintf("the template was stopped: %s (a limit on what one rendering may do: the template loops or grows without bound)", e.What)
}

// Unwrap returns the kind of limit.
func (e *LimitError) Unwrap() error { return e.Kind }

// budget is what one rendering has used. Limits are enforced by panicking
// with a *LimitError, which render recovers: the checks sit deep in
// builtins and value methods that return no error, and a stopped rendering
// leaves nothing behind (its state is its own).
type budget struct {
	steps, work int64
	depth       int
}

// renderMu serialises renderings so that the builtins, which receive no
// evaluator, can charge the active rendering's budget. A rendering is short
// (bounded by the limits, and microseconds for a real template) next to the
// model work each prompt costs, so that serialising them costs nothing
// measurable.
var (
	renderMu sync.Mutex
	active   *budget
)

func stop(kind error, format string, a ...any) {
	panic(&LimitError{Kind: kind, What: fmt.Sprintf(format, a...)})
}

// step charges one step to the active rendering.
func step() {
	if b := active; b != nil {
		b.steps++
		if b.steps > MaxSteps {
			stop(ErrSteps, "it ran more than %d steps", MaxSteps)
		}
	}
}

// steps charges n steps at once (a builtin's walk over n items).
func steps(n int) {
	if b := active; b != nil {
		b.steps += int64(n)
		if b.steps > MaxSteps {
			stop(ErrSteps, "it ran more than %d steps", MaxSteps)
		}
	}
}

// work charges n bytes of text read or built, of a string that exists.
func work(n int) {
	if b := active; b != nil {
		b.work += int64(n)
		if b.work > MaxWorkBytes {
			stop(ErrSteps, "it built more than %d bytes of text", int64(MaxWorkBytes))
		}
	}
}

// concat joins two strings within MaxBytes, checked before the copy.
func concat(a, b string) string {
	built(len(a) + len(b))
	return a + b
}

// checkReplace refuses a replacement of old by new in s (n times at most,
// -1 all) whose result would exceed MaxBytes, before it is built.
func checkReplace(s, old, new string, n int) {
	if len(new) <= len(old) {
		return
	}
	m := 0
	if old == "" {
		m = utf8.RuneCountInString(s) + 1 // before every rune and at the end
	} else {
		m = strings.Count(s, old)
	}
	if n >= 0 && n < m {
		m = n
	}
	checkProduct(len(new)-len(old), m)
	built(len(s) + m*(len(new)-len(old)))
}

// built charges n bytes of text built, after checking that a string of n
// bytes is allowed.
func built(n int) {
	checkBytes(n)
	if b := active; b != nil {
		b.work += int64(n)
		if b.work > MaxWorkBytes {
			stop(ErrSteps, "it built more than %d bytes of text", int64(MaxWorkBytes))
		}
	}
}

// checkBytes refuses a string of n bytes (checked before it is built).
func checkBytes(n int) {
	if n < 0 || n > MaxBytes {
		stop(ErrSize, "a string of more than %d bytes", MaxBytes)
	}
}

// checkItems refuses a list or dict of n items (checked before it is built).
func checkItems(n int) {
	if n < 0 || n > MaxItems {
		stop(ErrSize, "a list of more than %d items", MaxItems)
	}
}

// checkProduct refuses a string of count copies of n bytes, without
// overflowing.
func checkProduct(n, count int) {
	if n > 0 && count > MaxBytes/n {
		stop(ErrSize, "a string of more than %d bytes", MaxBytes)
	}
}

// nest checks the nesting depth of a value being walked.
func nest(depth int) {
	if depth > MaxNesting {
		stop(ErrDepth, "values nested more than %d deep (a list or dict that holds itself?)", MaxNesting)
	}
	step()
}

// enterCall and leaveCall bracket a macro or caller() call.
func enterCall() {
	if b := active; b != nil {
		b.depth++
		if b.depth > MaxCallDepth {
			stop(ErrDepth, "macro calls nested more than %d deep", MaxCallDepth)
		}
	}
}

func leaveCall() {
	if b := active; b != nil {
		b.depth--
	}
}
