package tensor_test

import (
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/tensortest"
)

// TestCPUDevice runs the device conformance suite on the CPU device, with
// OpenBLAS (when it loads) and with the pure-Go backend.
func TestCPUDevice(t *testing.T) {
	t.Run("cpu", func(t *testing.T) { tensortest.Ops(t, tensor.NewCPU(nil)) })
	t.Run("go", func(t *testing.T) { tensortest.Ops(t, tensor.NewCPU(tensor.PureGo())) })
}
