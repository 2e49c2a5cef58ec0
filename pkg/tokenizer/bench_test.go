package tokenizer

import (
	"strings"
	"testing"
)

// benchProse is English prose written for the benchmark (children's-story and
// technical registers, as in drafter's self-distillation data).
const benchProse = `Once upon a time, in a small village at the edge of a great forest, there lived a
girl named Mia who loved to collect smooth stones from the river. Every morning she walked
down the narrow path, past the old mill and the baker's shop, and filled her pockets with
grey and white pebbles. One day she found a stone that glowed faintly blue, and she wondered
whether it had fallen from the stars. She showed it to her grandmother, who smiled and said
that the river keeps its secrets for people who are patient enough to listen.

Speculative decoding speeds up generation by letting a small draft model propose several
tokens that the large target model then verifies in a single forward pass. When the draft
agrees with the target, the accepted tokens cost roughly one target step; when it does not,
the first rejected position is resampled from the corrected distribution, so the output
distribution is exactly the target's. The average acceptance length therefore determines the
speed-up, and it depends on how well the draft matches the target on the user's own data.

def accept(draft, target, rng):
    for i, (p, q) in enumerate(zip(target, draft)):
        if rng.random() < min(1.0, p / q):
            continue
        return i
    return len(draft)
`

// benchCorpus is the reference strings and the prose above, repeated.
func benchCorpus(b *testing.B, name string) string {
	var sb strings.Builder
	for range 20 {
		for _, c := range refCases(b, name) {
			sb.WriteString(c.Text)
			sb.WriteByte('\n')
		}
		sb.WriteString(benchProse)
	}
	return sb.String()
}

func benchEncode(b *testing.B, name string) {
	tk := tok(b, name)
	text := benchCorpus(b, name)
	n := len(tk.Encode(text, false))
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		tk.Encode(text, false)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkEncodeLlama3 measures byte-level BPE encoding on one goroutine.
func BenchmarkEncodeLlama3(b *testing.B) { benchEncode(b, "llama3") }

// BenchmarkEncodeLlama2 measures SentencePiece-style BPE encoding on one goroutine.
func BenchmarkEncodeLlama2(b *testing.B) { benchEncode(b, "llama2") }

// BenchmarkEncodeQwen3 measures byte-level BPE with an NFC normalizer.
func BenchmarkEncodeQwen3(b *testing.B) { benchEncode(b, "qwen3") }

// BenchmarkEncodeLlama3Cold measures Llama-3 encoding of text never seen
// before: the reference strings and the prose once each, with the word cache
// emptied before every pass, as when distill tokenizes a new dataset.
func BenchmarkEncodeLlama3Cold(b *testing.B) {
	tk := tok(b, "llama3")
	var sb strings.Builder
	for _, c := range refCases(b, "llama3") {
		sb.WriteString(c.Text)
		sb.WriteByte('\n')
	}
	sb.WriteString(benchProse)
	text := sb.String()
	n := len(tk.Encode(text, false))
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		st := tk.getState()
		clear(st.cache)
		tk.pool.Put(st)
		b.StartTimer()
		tk.Encode(text, false)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
