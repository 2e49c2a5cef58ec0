package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// seedTexts are the reference strings of every model plus some awkward inputs.
func seedTexts(t testing.TB) []string {
	var out []string
	for _, c := range refCases(t, models[0]) { // the strings are the same for every model
		out = append(out, c.Text)
	}
	out = append(out,
		"\u2028line\u2029sep\u0085nel\ufeffbom", "x\u3000y\u00a0\u00a0z", "'S 'T 'RE 'Ve 'LL 'D 'M 'x '",
		"123456789012 ١٢٣٤ ½ ⅓", "  \n\n  \t\r\n \t", "\xff\xfe invalid \xe6\x97", "a\u0301\u0301b",
		strings.Repeat("ab", 300), strings.Repeat("日本", 100), strings.Repeat(" ", 70)+"x",
		"<|im_start|><|im_start|>", "<s><s></s>", "▁leading marker▁", "emoji🏳️‍🌈flag",
	)
	return out
}

// randomText builds strings from pieces that exercise every branch of the
// pre-tokenizers and the merge loops.
func randomText(r *rand.Rand) string {
	parts := []string{"a", "b", "the", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "'", "1", "23", "4567",
		"é", "e\u0301", "日", "本語", "😀", "👨\u200d👩", "!", "?!", ".", ",", "(", ")", "<", ">", "|",
		"<|im_start|>", "<s>", "</s>", "<|begin_of_text|>", "\u00a0", "\u3000", "▁", "ſ", "K", "\u0085", "x", "Z"}
	var sb strings.Builder
	n := r.IntN(24)
	for range n {
		sb.WriteString(parts[r.IntN(len(parts))])
	}
	return sb.String()
}

// TestScannerMatchesRegexp2 checks the hand-written pre-tokenizer matchers against
// regexp2 running the original patterns.
func TestScannerMatchesRegexp2(t *testing.T) {
	texts := seedTexts(t)
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		texts = append(texts, randomText(r))
	}
	for _, src := range []string{llama3Regex, qwen2Regex, gpt2Regex} {
		fast := fastPattern(src)
		slow, err := compileRegex(src, "test")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			checkScanner(t, fast, slow, s)
		}
	}
}

func checkScanner(t *testing.T, fast pattern, slow *regexPattern, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		return // regexp2 sees U+FFFD where the scanner sees bytes; compared on valid text only
	}
	got := fast.find([]byte(s), nil)
	want := slow.find([]byte(s), nil)
	if !slices.Equal(got, want) {
		t.Fatalf("pattern %q on %q:\n got %v\nwant %v", slow.src, s, got, want)
	}
}

func FuzzScanner(f *testing.F) {
	for _, s := range []string{"Hello world", "  \n\n x", "'s'S'll 12345 ١٢٣", "a\u0085\u00a0b", "日本語。\r\n"} {
		f.Add(s)
	}
	var pats []pattern
	var slows []*regexPattern
	for _, src := range []string{llama3Regex, qwen2Regex, gpt2Regex} {
		slow, err := compileRegex(src, "test")
		if err != nil {
			f.Fatal(err)
		}
		pats = append(pats, fastPattern(src))
		slows = append(slows, slow)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i := range pats {
			checkScanner(t, pats[i], slows[i], s)
		}
	})
}

// TestMergeHeapMatchesLinear checks the two merge loops against each other on
// long random words (the linear one is used up to linearMergeMax symbols).
func TestMergeHeapMatchesLinear(t *testing.T) {
	for _, name := range []string{"llama3", "llama2"} {
		tk := tok(t, name)
		st := tk.getState()
		r := rand.New(rand.NewPCG(3, 4))
		for iter := range 300 {
			word := []byte(strings.ReplaceAll(randomText(r)+randomText(r)+randomText(r), " ", "▁"))
			if iter%3 == 0 {
				word = []byte(strings.Repeat("a", 1+r.IntN(200)))
			}
			var ids []int32
			var ends []int32
			for i := 0; i < len(word); {
				if tk.model.byteLevel {
					ids = append(ids, tk.model.byteTok[word[i]])
					i++
				} else {
					_, size := utf8.DecodeRune(word[i:])
					id, ok := tk.model.vocab[string(word[i:i+size])]
					if !ok {
						id = -1
					}
					ids = append(ids, id)
					i += size
				}
				ends = append(ends, int32(i))
			}
			i1, e1 := tk.model.mergeLinear(st, slices.Clone(ids), slices.Clone(ends))
			i1, e1 = slices.Clone(i1), slices.Clone(e1)
			i2, e2 := tk.model.mergeHeap(st, slices.Clone(ids), slices.Clone(ends))
			if !slices.Equal(i1, i2) || !slices.Equal(e1, e2) {
				t.Fatalf("%s %q: linear %v %v, heap %v %v", name, word, i1, e1, i2, e2)
			}
		}
	}
}

// TestWordMarkSplitExact checks that cutting SentencePiece text before each "▁"
// gives the tokens of encoding the whole text as one word.
func TestWordMarkSplitExact(t *testing.T) {
	testutil.Shared(t, "")
	for _, name := range []string{"llama2", "mistral", "stories260k"} {
		split, err := Load(modelDir(name) + "/tokenizer.json")
		if err != nil {
			t.Fatal(err)
		}
		whole, err := Load(modelDir(name) + "/tokenizer.json")
		if err != nil {
			t.Fatal(err)
		}
		if split.model.wordMark == "" {
			t.Fatalf("%s: the ▁ split should be enabled", name)
		}
		whole.model.wordMark = ""
		texts := seedTexts(t)
		r := rand.New(rand.NewPCG(5, 6))
		for range 500 {
			texts = append(texts, randomText(r))
		}
		for _, s := range texts {
			a, b := split.Encode(s, true), whole.Encode(s, true)
			if !slices.Equal(a, b) {
				t.Fatalf("%s %q: split %v, whole %v", name, s, a, b)
			}
		}
	}
}

// roundTrip checks decode(encode(s)) against what the tokenizer's normalization
// makes of s: byte-level tokenizers give s back (Qwen3 after NFC), SentencePiece
// tokenizers with byte fallback give s back as long as s holds no "▁" (which the
// decoder turns into a space) and no added-token text (each section gets its own
// prepended "▁", so "<s>x" decodes as "<s> x").
func roundTrip(t *testing.T, name string, tk *Tokenizer, s string) {
	t.Helper()
	ids, offs := tk.EncodeOffsets(s, true)
	plain := tk.Encode(s, true)
	if !slices.Equal(ids, plain) {
		t.Fatalf("%s %q: EncodeOffsets ids %v differ from Encode %v", name, s, ids, plain)
	}
	for i, o := range offs {
		if o[0] < 0 || o[1] < o[0] || o[1] > len(s) {
			t.Fatalf("%s %q: token %d offsets %v out of range", name, s, i, o)
		}
		if i > 0 && o[0] < offs[i-1][0] {
			t.Fatalf("%s %q: offsets not monotone at %d: %v", name, s, i, offs)
		}
	}
	got := tk.decodeRaw(tk.Encode(s, false), false, true, true)
	if !utf8.ValidString(s) {
		return // only "no panic" for invalid input
	}
	want := s
	switch name {
	case "qwen3":
		if strings.Contains(s, "<") {
			return // NFC runs per section between added tokens
		}
		want = norm.NFC.String(s)
	case "llama2", "mistral", "stories260k":
		if strings.Contains(s, "▁") || strings.Contains(s, "<s>") || strings.Contains(s, "</s>") || strings.Contains(s, "<unk>") {
			return
		}
	}
	if got != want {
		t.Fatalf("%s: decode(encode(%q)) = %q, want %q", name, s, got, want)
	}
}

func FuzzEncodeDecode(f *testing.F) {
	for _, s := range []string{"Hello world", " x", "日本語 🎉", "\xff\xfe", "a\u0301", "<s>x</s>", "<|im_start|>u"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, name := range models {
			roundTrip(t, name, tok(t, name), s)
		}
	})
}

func TestRoundTripSeeds(t *testing.T) {
	texts := seedTexts(t)
	r := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		texts = append(texts, randomText(r))
	}
	for _, name := range models {
		tk := tok(t, name)
		for _, s := range texts {
			roundTrip(t, name, tk, s)
		}
	}
}

// TestOffsetsCoverText checks that for Llama-3 (no normalizer) the tokens' byte
// ranges tile the input and each token's bytes are exactly the input's bytes.
func TestOffsetsCoverText(t *testing.T) {
	tk := tok(t, "llama3")
	for _, s := range seedTexts(t) {
		ids, offs := tk.EncodeOffsets(s, false)
		pos := 0
		for i, id := range ids {
			o := offs[i]
			if o[0] != pos {
				t.Fatalf("%q: token %d starts at %d, want %d", s, i, o[0], pos)
			}
			var raw []byte
			if tk.IsSpecial(id) {
				raw = []byte(tk.Token(id))
			} else {
				raw = appendByteLevel(nil, tk.Token(id))
			}
			if string(raw) != s[o[0]:o[1]] {
				t.Fatalf("%q: token %d (%q) covers %q", s, i, raw, s[o[0]:o[1]])
			}
			pos = o[1]
		}
		if pos != len(s) {
			t.Fatalf("%q: tokens end at %d of %d", s, pos, len(s))
		}
	}
	// SentencePiece: the token text with "▁" as a space matches the input range,
	// except the prepended "▁", which shares the first character's range.
	sp := tok(t, "llama2")
	s := "Hello world, 日本"
	ids, offs := sp.EncodeOffsets(s, true)
	if offs[0] != [2]int{0, 0} || ids[0] != 1 {
		t.Fatalf("BOS: id %d offsets %v", ids[0], offs[0])
	}
	var rebuilt strings.Builder
	for i := 1; i < len(ids); i++ {
		rebuilt.WriteString(s[offs[i][0]:offs[i][1]])
		if i+1 < len(ids) && offs[i+1][0] < offs[i][1] && offs[i+1][0] > offs[i][0] {
			t.Fatalf("overlapping offsets %v", offs)
		}
	}
	if !strings.Contains(rebuilt.String(), "Hello world") {
		t.Fatalf("offsets %v of %q rebuild %q", offs, s, rebuilt.String())
	}
}

// TestStreamDecoder checks that streaming one id at a time yields exactly Decode's
// text, including byte-fallback characters split over tokens, special tokens and
// the clean-up of " 's".
func TestStreamDecoder(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, name := range models {
		tk := tok(t, name)
		var seqs [][]int
		for _, c := range refCases(t, name) {
			seqs = append(seqs, c.IDsWithSpecial, c.IDs)
		}
		for range 300 {
			// Random ids, biased to the low ids (bytes, specials) and valid text.
			n := r.IntN(12)
			var ids []int
			for range n {
				if r.IntN(2) == 0 {
					ids = append(ids, r.IntN(300))
				} else {
					ids = append(ids, r.IntN(tk.VocabSize()))
				}
			}
			seqs = append(seqs, ids)
			seqs = append(seqs, tk.Encode(randomText(r), true))
		}
		for _, ids := range seqs {
			for _, skip := range []bool{false, true} {
				want := tk.Decode(ids, skip)
				d := tk.NewStreamDecoderSkip(skip)
				var sb strings.Builder
				for _, id := range ids {
					chunk := d.Add(id)
					if strings.HasSuffix(chunk, "\uFFFD") && !strings.Contains(want, "\uFFFD") {
						t.Fatalf("%s %v: chunk %q ends in a replacement character", name, ids, chunk)
					}
					sb.WriteString(chunk)
				}
				sb.WriteString(d.Flush())
				if sb.String() != want {
					t.Fatalf("%s %v skip=%v: stream %q, Decode %q", name, ids, skip, sb.String(), want)
				}
			}
		}
	}
}

// TestStreamWaitsForCharacter checks that a character split over byte tokens is
// held until complete.
func TestStreamWaitsForCharacter(t *testing.T) {
	tk := tok(t, "llama2")
	ids := tk.Encode("x 😀", false) // the emoji needs byte fallback
	d := tk.NewStreamDecoder()
	var chunks []string
	for _, id := range ids {
		chunks = append(chunks, d.Add(id))
	}
	chunks = append(chunks, d.Flush())
	if strings.Join(chunks, "") != "x 😀" {
		t.Fatalf("chunks %q", chunks)
	}
	for _, c := range chunks {
		if strings.ContainsRune(c, utf8.RuneError) {
			t.Fatalf("a partial character was emitted: %q", chunks)
		}
	}
	if chunks[len(chunks)-2] != " 😀" && chunks[len(chunks)-2] != "😀" {
		t.Fatalf("the emoji should come out with its last byte token: %q", chunks)
	}
}

func FuzzStreamDecode(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 201})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, name := range models {
			tk := tok(t, name)
			var ids []int
			for i := 0; i+1 < len(b); i += 2 {
				ids = append(ids, (int(b[i])<<8|int(b[i+1]))%(tk.VocabSize()+5))
			}
			want := tk.Decode(ids, false)
			d := tk.NewStreamDecoderSkip(false)
			var sb strings.Builder
			for _, id := range ids {
				sb.WriteString(d.Add(id))
			}
			sb.WriteString(d.Flush())
			if sb.String() != want {
				t.Fatalf("%s %v: stream %q, Decode %q", name, ids, sb.String(), want)
			}
		}
	})
}
