// Command coretype prints OPENBLAS_CORETYPE=FAMILY, the kernel family drafter
// sets before it loads OpenBLAS (cpu.OpenBLASCoreType), as an argument for
// env(1); nothing when the variable is already set or the processor supports
// neither family. Test binaries and benchmarks run with it
// (`env $(go run ./scripts/coretype) go test ./...`) load the same OpenBLAS
// kernels as the drafter binary.
package main

import (
	"fmt"
	"os"

	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

func main() {
	if os.Getenv("OPENBLAS_CORETYPE") != "" {
		return
	}
	if ct := cpu.OpenBLASCoreType(); ct != "" {
		fmt.Printf("OPENBLAS_CORETYPE=%s\n", ct)
	}
}
