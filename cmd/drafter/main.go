// Command drafter trains speculative-decoding drafters (Medusa-1 heads and
// EAGLE-3 draft layers) for a fine-tuned Hugging Face checkpoint: it self-distils
// responses from the frozen target, captures the target's hidden states, trains
// the drafter on them and measures it with real speculative decoding.
//
// This package only parses flags and calls one library function per command.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit codes, documented in the README: a release pipeline can tell a broken
// run from a drafter that fell short of its gate.
const (
	exitOK      = 0
	exitError   = 1 // bad input, I/O failure, interrupted run
	exitUsage   = 2 // unknown command or flag
	exitGateHit = 3 // drafter eval: the drafter fell short of --min-acceptance or --max-drop
)

// gateError marks a failed acceptance gate so main can exit with exitGateHit.
type gateError struct{ msg string }

func (e *gateError) Error() string { return e.msg }

// usageError marks a command-line mistake.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "drafter:", err)
	os.Exit(exitCode(err))
}

// exitCode maps an error returned by a command to the process exit status.
func exitCode(err error) int {
	var ge *gateError
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ge):
		return exitGateHit
	case errors.As(err, &ue), strings.HasPrefix(err.Error(), "required flag"), strings.HasPrefix(err.Error(), "unknown command"):
		return exitUsage
	default:
		return exitError
	}
}
