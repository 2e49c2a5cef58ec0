// Command bench runs drafter's Go benchmarks on both compute paths (OpenBLAS and
// pure Go) and prints one table: every benchmark with the metrics it reports
// (tokens/s, GFLOP/s, MB/s, ...). `make bench` runs it; record its output, with the
// machine and date, in docs/performance.md.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
)

// row is one benchmark result line.
type row struct {
	backend, pkg, name string
	metrics            []string
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)

func main() {
	pkgs := flag.String("pkgs", "./pkg/... ./capture/... ./train/... ./eval/...", "packages to benchmark (space separated)")
	filter := flag.String("bench", ".", "benchmark name filter (go test -bench)")
	benchtime := flag.String("benchtime", "2s", "go test -benchtime per benchmark (heavy ones run once)")
	backends := flag.String("backends", "openblas,go", "compute paths to run: openblas, go")
	flag.Parse()

	var rows []row
	for _, be := range strings.Split(*backends, ",") {
		args := append([]string{"test", "-run", "^$", "-bench", *filter, "-benchtime", *benchtime}, strings.Fields(*pkgs)...)
		cmd := exec.Command("go", args...)
		cmd.Env = os.Environ()
		switch {
		case be == "go":
			cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
		case os.Getenv("OPENBLAS_CORETYPE") == "" && cpu.OpenBLASCoreType() != "":
			// The kernels the drafter binary would load (cmd/drafter sets it).
			cmd.Env = append(cmd.Env, "OPENBLAS_CORETYPE="+cpu.OpenBLASCoreType())
		}
		var out bytes.Buffer
		cmd.Stdout = &out
		cmd.Stderr = os.Stderr
		fmt.Fprintf(os.Stderr, "bench: running %s benchmarks (%s)...\n", be, strings.Join(args, " "))
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: go test failed for %s: %v\n%s", be, err, out.String())
			os.Exit(1)
		}
		pkg := ""
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "pkg: ") {
				pkg = strings.TrimPrefix(strings.TrimPrefix(line, "pkg: "), "github.com/drafter-ai/drafter/")
				continue
			}
			m := benchLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			rows = append(rows, row{backend: be, pkg: pkg, name: strings.TrimPrefix(m[1], "Benchmark"), metrics: metrics(m[3])})
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].pkg != rows[j].pkg {
			return rows[i].pkg < rows[j].pkg
		}
		return rows[i].name < rows[j].name
	})
	fmt.Printf("drafter benchmarks, %s, %s/%s, %d CPUs\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "package\tbenchmark\tbackend\tmetrics")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.pkg, r.name, r.backend, strings.Join(r.metrics, "  "))
	}
	tw.Flush()
}

// metrics keeps the value-unit pairs a benchmark reports, dropping ns/op and
// allocation counts unless they are the only figures.
func metrics(s string) []string {
	f := strings.Fields(s)
	var keep, all []string
	for i := 0; i+1 < len(f); i += 2 {
		m := f[i] + " " + f[i+1]
		all = append(all, m)
		switch f[i+1] {
		case "ns/op", "B/op", "allocs/op":
			continue
		}
		keep = append(keep, m)
	}
	if len(keep) == 0 {
		return all
	}
	return keep
}
