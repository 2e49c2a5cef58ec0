package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/pkg/devices"
)

type devicesOptions struct {
	JSON bool
	Out  io.Writer
}

func newCmdDevices(runF func(*devicesOptions) error) *cobra.Command {
	o := &devicesOptions{}
	c := &cobra.Command{
		Use:   "devices [--json]",
		Short: "List the devices drafter can compute on, and why a GPU cannot be used",
		Long: `devices lists the CPU device (with the BLAS its products run on) and every CUDA GPU the
driver shows, with its compute capability, memory and the cuBLAS found, or the one-line reason
drafter cannot use it (no libcuda.so.1, cuInit failed, compute capability below 8.0, no cuBLAS).
--device auto picks the first usable GPU, else the CPU.

The driver and cuBLAS are loaded at run time: DRAFTER_LIBCUDA names the driver library
(default libcuda.so.1) and DRAFTER_CUDA_LIBS a folder holding libcublas.so.13, .12 or .11.`,
		Example: `  drafter devices
  DRAFTER_CUDA_LIBS=/usr/local/cuda/lib64 drafter devices --json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return runDevices(o)
		},
	}
	c.Flags().BoolVar(&o.JSON, "json", false, "print a JSON list: device, name, usable, reason")
	return c
}

func runDevices(o *devicesOptions) error {
	be, err := backend()
	if err != nil {
		return err
	}
	found := devices.List(be)
	if o.JSON {
		type row struct {
			Device string `json:"device"`
			Name   string `json:"name"`
			Usable bool   `json:"usable"`
			Reason string `json:"reason,omitempty"`
		}
		rows := make([]row, len(found))
		for i, f := range found {
			rows[i] = row{f.Spec.String(), f.Name, f.Usable, f.Reason}
		}
		e := json.NewEncoder(o.Out)
		e.SetIndent("", "  ")
		return e.Encode(rows)
	}
	for _, f := range found {
		if f.Usable {
			fmt.Fprintf(o.Out, "%-8s %s\n", f.Spec, f.Name)
		} else {
			fmt.Fprintf(o.Out, "%-8s unusable: %s\n", f.Spec, f.Reason)
		}
	}
	return nil
}
