// Command drafter trains speculative-decoding drafters (Medusa-1 heads and
// EAGLE-3 draft layers) for a fine-tuned Hugging Face checkpoint: it self-distils
// responses from the frozen target, captures the target's hidden states, trains
// the drafter on them and measures it with real speculative decoding.
//
// Every command follows one pattern: a file per command, an options struct the
// flags fill, and newCmdX(runF) whose RunE checks the flags (table-driven, see
// flags.go), builds the library options and calls runF when a test gave one,
// else the library. Flag names and their parsing live only in this package;
// the libraries return typed errors that the commands turn into a *usageError
// naming the flag.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/drafter-ai/drafter/pkg/devices"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/spf13/cobra"
)

// Exit codes, documented in the README: a release pipeline can tell a broken
// run from a command-line mistake and from a drafter that fell short of its
// gate.
const (
	exitOK      = 0
	exitError   = 1 // bad input, I/O failure, interrupted run
	exitUsage   = 2 // a command-line mistake, whichever command
	exitGateHit = 3 // drafter eval: the drafter fell short of --min-acceptance or --max-drop
)

// gateError marks a failed acceptance gate so main can exit with exitGateHit.
type gateError struct{ err error }

func (e *gateError) Error() string { return e.err.Error() }
func (e *gateError) Unwrap() error { return e.err }

// usageError is the one command-line mistake type: an unknown command or
// flag, a missing required flag, a value a flag cannot take, flags that
// contradict each other or do not apply. It maps to exitUsage.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a *usageError with a formatted message.
func usagef(format string, a ...any) error {
	return &usageError{fmt.Errorf(format, a...)}
}

func main() {
	setOpenBLASCoreType()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := execute(ctx, newRootCmd(nil), os.Args[1:])
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "drafter:", err)
	stop()
	os.Exit(exitCode(err))
}

// execute runs the command line args on root. Errors that cobra raises
// before a command's RunE runs (an unknown command, a missing required flag,
// a stray argument) are command-line mistakes and come back as *usageError.
func execute(ctx context.Context, root *cobra.Command, args []string) error {
	ran := false
	var wrap func(c *cobra.Command)
	wrap = func(c *cobra.Command) {
		if run := c.RunE; run != nil {
			c.RunE = func(c *cobra.Command, args []string) error {
				ran = true
				return run(c, args)
			}
		}
		for _, sub := range c.Commands() {
			wrap(sub)
		}
	}
	wrap(root)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var ue *usageError
	if err != nil && !ran && !errors.As(err, &ue) {
		return &usageError{err}
	}
	return err
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
	case errors.As(err, &ue):
		return exitUsage
	default:
		return exitError
	}
}

// The process environment drafter reads, beside filecache.EnvDir.
const (
	// envBLAS chooses the compute backend (see backendFor).
	envBLAS = "DRAFTER_BLAS"
	// envCoreType is OpenBLAS's own: the kernel family it loads.
	envCoreType = "OPENBLAS_CORETYPE"
)

// setOpenBLASCoreType sets OPENBLAS_CORETYPE, when the user has not, to the
// kernel family the CPU's features support (cpu.OpenBLASCoreType). It runs
// first in main, before anything loads OpenBLAS, which reads the variable
// once as it loads: on virtual machines that hide the CPU model OpenBLAS may
// otherwise fall back to its generic kernels.
func setOpenBLASCoreType() {
	if os.Getenv(envCoreType) != "" {
		return
	}
	if ct := cpu.OpenBLASCoreType(); ct != "" {
		os.Setenv(envCoreType, ct)
	}
}

// backend returns the compute backend DRAFTER_BLAS asks for, for the
// commands that run the model on the CPU.
func backend() (cpu.Backend, error) { return backendFor(os.Getenv(envBLAS)) }

// deviceChoice is the --device flag of the commands that compute, and where
// the one line saying which device runs (auto) goes.
type deviceChoice struct {
	Spec string
	cmd  *cobra.Command // whose standard error gets the note
}

// register defines --device on c.
func (d *deviceChoice) register(c *cobra.Command) {
	d.cmd = c
	c.Flags().StringVar(&d.Spec, "device", "auto", "where to compute: auto (a CUDA GPU when the driver, a GPU of compute capability 8.0 or later and cuBLAS are found, else the CPU, saying why), cpu, cuda or cuda:N")
}

// open opens the device the flag names (the CPU device's products on the
// backend DRAFTER_BLAS names). A value it cannot parse is a usage error.
func (d *deviceChoice) open() (*devices.Opened, error) {
	spec, err := devices.Parse(d.Spec)
	if err != nil {
		return nil, &usageError{err}
	}
	be, err := backend()
	if err != nil {
		return nil, err
	}
	o, err := devices.Open(spec, be)
	if err != nil {
		return nil, err
	}
	if o.Note != "" && d.cmd != nil {
		fmt.Fprintln(d.cmd.ErrOrStderr(), o.Note)
	}
	return o, nil
}

// loadTarget opens the device d names and loads the checkpoint in dir with
// its model on it, with the fingerprints cached in the user's cache. The
// target's Close does not release the device: the caller closes it after.
func loadTarget(dir string, d *deviceChoice) (*target.Target, *devices.Opened, error) {
	dev, err := d.open()
	if err != nil {
		return nil, nil, err
	}
	t, err := target.Load(dir, dev, fileCache())
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	return t, dev, nil
}

// backendFor returns the compute backend for a DRAFTER_BLAS value: unset or
// empty, OpenBLAS when it is installed and pure Go otherwise; "go", pure Go;
// "openblas", OpenBLAS or an error saying why it cannot be loaded. Any other
// value is a *usageError, not a silent default.
func backendFor(v string) (cpu.Backend, error) {
	switch v {
	case "":
		return cpu.DefaultBackend(), nil
	case "go":
		return cpu.PureGo(), nil
	case "openblas":
		be, err := cpu.OpenBLAS()
		if err != nil {
			return nil, fmt.Errorf("%s=openblas: %w", envBLAS, err)
		}
		return be, nil
	}
	return nil, usagef("%s=%q: want go (pure Go), openblas (OpenBLAS, which must be installed), or unset (OpenBLAS when installed, else pure Go)", envBLAS, v)
}
