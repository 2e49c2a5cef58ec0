package cpu

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// childEnv marks the test binary run as a fresh process by
// TestCPUReadsNoEnvironment.
const childEnv = "TENSOR_TEST_CPU_CHILD"

// CPU chooses by what is installed only: DRAFTER_BLAS is the command's to
// read, and loading OpenBLAS sets no environment variable (OPENBLAS_CORETYPE
// is the command's to set). Each case runs in a fresh process, since the
// library is loaded once per process.
func TestCPUReadsNoEnvironment(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		be := DefaultBackend()
		_, coretype := os.LookupEnv("OPENBLAS_CORETYPE")
		fmt.Printf("backend=%s coretype=%v\n", be.Name(), coretype)
		return
	}
	want := "go"
	if o, err := OpenBLAS(); err == nil {
		want = o.Name()
	}
	for _, blas := range []string{"", "go"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCPUReadsNoEnvironment$")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "OPENBLAS_CORETYPE=") && !strings.HasPrefix(kv, "DRAFTER_BLAS=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, childEnv+"=1", "DRAFTER_BLAS="+blas)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("DRAFTER_BLAS=%q: %v\n%s", blas, err, out)
		}
		if line := "backend=" + want + " coretype=false\n"; !strings.HasPrefix(string(out), line) {
			t.Errorf("DRAFTER_BLAS=%q: DefaultBackend() in a fresh process says %q, want %q", blas, out, line)
		}
	}
}

// PureGo is the pure-Go backend whatever is installed.
func TestPureGo(t *testing.T) {
	if got := PureGo().Name(); got != "go" {
		t.Fatalf("PureGo().Name() = %q", got)
	}
}
