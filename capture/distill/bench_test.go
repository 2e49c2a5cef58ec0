package distill

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/target"
)

// BenchmarkDistill measures distillation with capture (float16, EAGLE-3
// layers + final_norm) on stories260k and the 60M random Llama, at batch 1 and
// 8: generated tokens/s, the share of the time spent copying and writing
// states, and bytes per stored token.
func BenchmarkDistill(b *testing.B) {
	stories := loadStories(b)
	m60, err := model.NewRandom(model.Bench60MConfig(), 1, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer m60.Close()
	// The random model uses the stories tokenizer for its prompts; its
	// generations run to the length limit.
	t60, err := target.New(m60, stories.Tok, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		t      *target.Target
		newTok int
	}{{"stories260k", stories, 128}, {"random60M", t60, 32}} {
		for _, batch := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/batch%d", c.name, batch), func(b *testing.B) {
				dir := b.TempDir()
				prompts := promptFile(b, dir)
				var tok, sec, capSec float64
				var bpt float64
				for i := 0; i < b.N; i++ {
					opt := Options{Prompts: prompts, Out: filepath.Join(dir, fmt.Sprint("o", i)), Batch: batch, Seed: 1,
						SamplesPerPrompt: 1, DType: capture.Float16,
						Sampling: generate.Overrides{Temperature: f64p(1), MaxNewTokens: intp(c.newTok)}}
					sum, err := Run(context.Background(), c.t, opt)
					if err != nil {
						b.Fatal(err)
					}
					tok += float64(sum.Generated)
					sec += sum.Seconds
					capSec += sum.CaptureSeconds
					bpt = sum.Manifest.BytesPerToken
				}
				b.ReportMetric(tok/sec, "gen_tok/s")
				b.ReportMetric(100*capSec/sec, "capture_%")
				b.ReportMetric(bpt, "bytes/token")
			})
		}
	}
}
