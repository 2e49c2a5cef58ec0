package tensor_test

import (
	"fmt"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestHalfConversionsShortDestination checks that a destination shorter
// than the source panics, naming the conversion.
func TestHalfConversionsShortDestination(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || fmt.Sprint(r) != "tensor: BF16ToF32: a destination of 2 values for 3" {
			t.Fatalf("recovered %v", r)
		}
	}()
	tensor.BF16ToF32(make([]float32, 2), make([]uint16, 3))
}
