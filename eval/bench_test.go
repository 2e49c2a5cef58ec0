package eval

import (
	"os"
	"strconv"
	"testing"
)

// BenchmarkSpeculative runs eval on stories260k for each drafter kind and
// draft shape at temperature 0 and reports the baseline's and the speculative
// run's tokens/s, their ratio (speed-up), the mean acceptance length and the
// drafter's share of the speculative time, all from the same run.
//
// DRAFTER_BENCH_MEDUSA and DRAFTER_BENCH_EAGLE3 name trained drafters (a
// train command's output or one of its exports); without them the benchmark
// uses random drafters, which accept about one token per forward and so
// measure the per-step overhead of speculation rather than its gain.
// DRAFTER_BENCH_PROMPTS bounds the prompts (default 10).
func BenchmarkSpeculative(b *testing.B) {
	m := loadTarget(b)
	n := 10
	if s := os.Getenv("DRAFTER_BENCH_PROMPTS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("DRAFTER_BENCH_PROMPTS=%q: want a positive number of prompts", s)
		}
	}
	ps := testPrompts(b, evalPrompts, n)
	load := func(env string, random func() *Drafter) *Drafter {
		dir := os.Getenv(env)
		if dir == "" {
			return random()
		}
		info, err := Detect(dir)
		if err != nil {
			b.Fatal(err)
		}
		d, err := LoadDrafter(info, m)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	cases := []struct {
		name string
		d    *Drafter
		cfgs map[string]Config
	}{
		{"medusa", load("DRAFTER_BENCH_MEDUSA", func() *Drafter { return randomMedusa(b, m, 4, 1) }),
			map[string]Config{"chain": {Mode: ModeChain}, "tree": {Mode: ModeTree}}},
		{"eagle3", load("DRAFTER_BENCH_EAGLE3", func() *Drafter { return randomEagle(b, m, 256, 2) }),
			map[string]Config{"chain-4": {Mode: ModeChain}, "chain-7": {Mode: ModeChain, Depth: 7}, "tree": {Mode: ModeTree}}},
	}
	for _, c := range cases {
		for _, shape := range []string{"chain", "chain-4", "chain-7", "tree"} {
			cfg, ok := c.cfgs[shape]
			if !ok {
				continue
			}
			b.Run(c.name+"/"+shape, func(b *testing.B) {
				var base, specT, tau, share float64
				for b.Loop() {
					rep := runLossless(b, m, c.d, ps, cfg, DefaultMaxNewTokens)
					base += rep.Baseline.TokensPerSec
					specT += rep.Speculative.TokensPerSec
					tau = rep.MeanAcceptLength
					share += rep.DrafterShare
				}
				k := float64(b.N)
				b.ReportMetric(base/k, "base-tok/s")
				b.ReportMetric(specT/k, "spec-tok/s")
				b.ReportMetric(specT/base, "speedup")
				b.ReportMetric(tau, "tau")
				b.ReportMetric(share/k, "drafter-share")
			})
		}
	}
}
