package cpu_test

import (
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/pkg/tensor/tensortest"
)

// TestCPUDevice runs the device conformance suite on the CPU device, with
// OpenBLAS (when it loads) and with the pure-Go backend.
func TestCPUDevice(t *testing.T) {
	t.Run("cpu", func(t *testing.T) { tensortest.Ops(t, cpu.New(nil)) })
	t.Run("go", func(t *testing.T) { tensortest.Ops(t, cpu.New(cpu.PureGo())) })
}
