package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// decodeCtx says where the decoded tokens sit in the whole sequence: decoders that
// strip at the start of the text (Strip after Fuse, Metaspace's prefix) act only
// when the first token is the sequence's first, and Strip's end only at its end.
type decodeCtx struct {
	atStart, atEnd bool
	fused          bool
	t              *Tokenizer
}

// decodeStep is one decoder of the chain; it maps token strings to token strings.
type decodeStep interface {
	decodeChain(tokens []string, ctx *decodeCtx) []string
}

type byteLevelDecoder struct{}

// decodeChain maps the characters of each run of non-added tokens back to bytes and
// decodes them as UTF-8 (invalid sequences become U+FFFD, one per maximal invalid
// subpart, as TextDecoder and String::from_utf8_lossy do); added tokens pass as
// they are.
func (byteLevelDecoder) decodeChain(tokens []string, ctx *decodeCtx) []string {
	out := tokens[:0:0]
	var buf []byte
	flush := func() {
		if len(buf) > 0 {
			out = append(out, string(appendLossy(nil, buf)))
			buf = buf[:0]
		}
	}
	for _, tok := range tokens {
		if _, ok := ctx.t.addedByContent(tok); ok {
			flush()
			out = append(out, tok)
			continue
		}
		buf = appendByteLevel(buf, tok)
	}
	flush()
	return out
}

// appendByteLevel appends the bytes of a byte-level token; a token holding any
// character outside the byte map contributes its UTF-8 bytes unchanged.
func appendByteLevel(dst []byte, tok string) []byte {
	n0 := len(dst)
	for _, r := range tok {
		if r < 0 || int(r) >= len(charByte) || charByte[r] == 0 {
			return append(dst[:n0], tok...)
		}
		dst = append(dst, byte(charByte[r]-1))
	}
	return dst
}

// replaceDecoder replaces a literal pattern in every token.
type replaceDecoder struct {
	pat     string
	content string
}

func (r *replaceDecoder) decodeChain(tokens []string, ctx *decodeCtx) []string {
	out := make([]string, len(tokens))
	for i, tok := range tokens {
		out[i] = strings.ReplaceAll(tok, r.pat, r.content)
	}
	return out
}

type byteFallbackDecoder struct{}

// decodeChain turns each run of <0xNN> tokens into the text its bytes decode to.
func (byteFallbackDecoder) decodeChain(tokens []string, ctx *decodeCtx) []string {
	out := make([]string, 0, len(tokens))
	var buf []byte
	for _, tok := range tokens {
		if b, ok := parseByteToken(tok); ok {
			buf = append(buf, b)
			continue
		}
		if len(buf) > 0 {
			out = append(out, string(appendLossy(nil, buf)))
			buf = buf[:0]
		}
		out = append(out, tok)
	}
	if len(buf) > 0 {
		out = append(out, string(appendLossy(nil, buf)))
	}
	return out
}

func parseByteToken(tok string) (byte, bool) {
	if len(tok) != 6 || tok[0] != '<' || tok[1] != '0' || tok[2] != 'x' || tok[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(tok[3])
	lo, ok2 := hexVal(tok[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

type fuseDecoder struct{}

func (fuseDecoder) decodeChain(tokens []string, ctx *decodeCtx) []string {
	ctx.fused = true
	return []string{strings.Join(tokens, "")}
}

// stripDecoder removes up to start leading and stop trailing occurrences of a
// character from each token (from the whole text after Fuse).
type stripDecoder struct {
	content     rune
	start, stop int
}

func (s *stripDecoder) decodeChain(tokens []string, ctx *decodeCtx) []string {
	out := make([]string, len(tokens))
	for i, tok := range tokens {
		if !ctx.fused || ctx.atStart {
			for k := 0; k < s.start; k++ {
				r, size := utf8.DecodeRuneInString(tok)
				if size == 0 || r != s.content {
					break
				}
				tok = tok[size:]
			}
		}
		if !ctx.fused || ctx.atEnd {
			for k := 0; k < s.stop; k++ {
				r, size := utf8.DecodeLastRuneInString(tok)
				if size == 0 || r != s.content {
					break
				}
				tok = tok[:len(tok)-size]
			}
		}
		out[i] = tok
	}
	return out
}

// metaspaceDecoder turns the replacement character back into spaces and drops the
// space it prepended to the first token.
type metaspaceDecoder struct {
	replacement string
	stripFirst  bool
}

func (m *metaspaceDecoder) decodeChain(tokens []string, ctx *decodeCtx) []string {
	out := make([]string, len(tokens))
	for i, tok := range tokens {
		s := strings.ReplaceAll(tok, m.replacement, " ")
		if i == 0 && ctx.atStart && m.stripFirst && strings.HasPrefix(s, " ") {
			s = s[1:]
		}
		out[i] = s
	}
	return out
}

func buildDecoder(raw json.RawMessage, field string, into []decodeStep) ([]decodeStep, error) {
	if isNull(raw) {
		return into, nil
	}
	var c compJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	switch c.Type {
	case "Sequence":
		for i, sub := range c.Decoders {
			var err error
			if into, err = buildDecoder(sub, fmt.Sprintf("%s.decoders[%d]", field, i), into); err != nil {
				return nil, err
			}
		}
		return into, nil
	case "ByteLevel":
		return append(into, byteLevelDecoder{}), nil
	case "Replace":
		if c.Pattern == nil || c.Pattern.String == nil {
			return nil, fmt.Errorf("%s.pattern: only {\"String\": ...} patterns are supported in the Replace decoder", field)
		}
		return append(into, &replaceDecoder{pat: *c.Pattern.String, content: c.Content}), nil
	case "ByteFallback":
		return append(into, byteFallbackDecoder{}), nil
	case "Fuse":
		return append(into, fuseDecoder{}), nil
	case "Strip":
		r, size := utf8.DecodeRuneInString(c.Content)
		if size == 0 || size != len(c.Content) {
			return nil, fmt.Errorf("%s.content: expected one character, got %q", field, c.Content)
		}
		if c.Start < 0 || c.Stop < 0 {
			return nil, fmt.Errorf("%s: negative start/stop", field)
		}
		return append(into, &stripDecoder{content: r, start: c.Start, stop: c.Stop}), nil
	case "Metaspace":
		m := &metaspaceDecoder{replacement: c.Replacement, stripFirst: true}
		if m.replacement == "" {
			m.replacement = "▁"
		}
		switch {
		case c.PrependScheme != "":
			m.stripFirst = c.PrependScheme != "never"
		case c.AddPrefixSpace != nil:
			m.stripFirst = *c.AddPrefixSpace
		}
		return append(into, m), nil
	default:
		return nil, fmt.Errorf("%s: unsupported decoder type %q (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)", field, c.Type)
	}
}

// decoderStreamSafe reports whether decoding a sequence in consecutive windows cut
// at token boundaries (where the text so far is complete UTF-8) gives the same text
// as decoding it whole. Otherwise the stream decoder re-decodes from the start.
func decoderStreamSafe(steps []decodeStep, has bool) bool {
	if !has {
		return false // tokens are joined with spaces
	}
	grouped, fused := false, false // runs of tokens joined (ByteLevel, ByteFallback), all joined (Fuse)
	for _, s := range steps {
		switch d := s.(type) {
		case fuseDecoder:
			fused = true
		case byteLevelDecoder, byteFallbackDecoder:
			grouped = true
		case *stripDecoder:
			// Per token it is local; after Fuse only its start is, which the
			// stream settles before moving on; per group of tokens it is not.
			if (fused && d.stop > 0) || (grouped && !fused) {
				return false
			}
		case *replaceDecoder:
			if utf8.RuneCountInString(d.pat) > 1 && (grouped || fused) {
				return false
			}
		case *metaspaceDecoder:
			if grouped && !fused {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// addedByContent returns the index of the added token with content s.
func (t *Tokenizer) addedByContent(s string) (int, bool) {
	id, ok := t.addedVocab[s]
	if !ok {
		return 0, false
	}
	i, ok := t.addedID[id]
	return i, ok && t.added[i].content == s
}

// decodeRaw runs the decoder chain over ids (skipping special tokens when asked and
// ids outside the vocabulary), without clean-up.
func (t *Tokenizer) decodeRaw(ids []int, skipSpecial, atStart, atEnd bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		if id < 0 || id >= len(t.tokens) {
			continue
		}
		if skipSpecial && t.special[id] {
			continue
		}
		tokens = append(tokens, t.tokens[id])
	}
	if len(tokens) == 0 {
		return ""
	}
	if len(t.decoder) == 0 {
		return strings.Join(tokens, " ")
	}
	ctx := &decodeCtx{atStart: atStart, atEnd: atEnd, t: t}
	for _, d := range t.decoder {
		tokens = d.decodeChain(tokens, ctx)
	}
	return strings.Join(tokens, "")
}

// Decode returns the text of ids. With skipSpecial, added tokens flagged special
// are left out. Ids outside the vocabulary are skipped. When the tokenizer was
// loaded with LoadDir and its config asks for it, transformers'
// clean_up_tokenization_spaces is applied.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	s := t.decodeRaw(ids, skipSpecial, true, true)
	if t.cleanUp {
		s = cleanUpSpaces(s)
	}
	return s
}

// cleanUpReplacer lists transformers' clean_up_tokenization replacements, applied
// one after the other over the whole text.
var cleanUpPairs = [...][2]string{
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
	{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
}

func cleanUpSpaces(s string) string {
	if !strings.Contains(s, " ") {
		return s
	}
	for _, p := range cleanUpPairs {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}

// inCleanUpAlphabet reports whether c occurs in a clean-up pattern. A cut between
// two characters of which one is outside this alphabet cannot split a match, in any
// of the passes (they only delete spaces).
func inCleanUpAlphabet(c byte) bool {
	switch c {
	case ' ', '.', '?', '!', ',', '\'', 'n', 't', 'm', 's', 'v', 'e', 'r':
		return true
	}
	return false
}

// appendLossy appends b decoded as UTF-8 with each maximal invalid subpart replaced
// by U+FFFD (the WHATWG and Rust from_utf8_lossy rule).
func appendLossy(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || size > 1 {
			dst = append(dst, b[i:i+size]...)
			i += size
			continue
		}
		// Invalid: skip the lead byte and the continuation bytes that could still
		// have completed it.
		need, lo, hi := 0, byte(0x80), byte(0xBF)
		switch {
		case c >= 0xC2 && c <= 0xDF:
			need = 1
		case c == 0xE0:
			need, lo = 2, 0xA0
		case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
			need = 2
		case c == 0xED:
			need, hi = 2, 0x9F
		case c == 0xF0:
			need, lo = 3, 0x90
		case c >= 0xF1 && c <= 0xF3:
			need = 3
		case c == 0xF4:
			need, hi = 3, 0x8F
		}
		j := i + 1
		for k := 0; k < need && j < len(b); k++ {
			if b[j] < lo || b[j] > hi {
				break
			}
			lo, hi = 0x80, 0xBF
			j++
		}
		dst = append(dst, "\uFFFD"...)
		i = j
	}
	return dst
}

// StreamDecoder turns ids into text one at a time, for streaming generations. The
// concatenation of everything Add and Flush return equals Decode of all the ids. It
// returns text only once a character is complete (and, with clean-up, once no later
// token can change it).
type StreamDecoder struct {
	t        *Tokenizer
	skip     bool
	window   []int  // ids not yet decoded for good
	accepted string // text of window already taken into pending
	atStart  bool   // window starts at the first id
	pending  []byte // decoded text held back by clean-up
}

// NewStreamDecoder returns a StreamDecoder that skips special tokens, as generated
// text is usually shown (the same as Decode(ids, true)).
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return t.NewStreamDecoderSkip(true) }

// NewStreamDecoderSkip returns a StreamDecoder equivalent to Decode(ids, skipSpecial).
func (t *Tokenizer) NewStreamDecoderSkip(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skip: skipSpecial, atStart: true}
}

// Add appends one id and returns the text that became final.
func (d *StreamDecoder) Add(id int) string {
	d.window = append(d.window, id)
	text := d.t.decodeRaw(d.window, d.skip, d.atStart, !d.t.streamSafe)
	if !strings.HasPrefix(text, d.accepted) || strings.HasSuffix(text, "\uFFFD") {
		return "" // an incomplete character, or text that may still change
	}
	d.pending = append(d.pending, text[len(d.accepted):]...)
	d.accepted = text
	if d.t.streamSafe && text != "" {
		// The window ends on a complete character and its start is settled: the
		// text so far is final and the next window starts here.
		d.window = d.window[:0]
		d.accepted = ""
		d.atStart = false
	}
	return d.emit(false)
}

// Flush returns the remaining text (incomplete characters become U+FFFD) and
// resets the decoder.
func (d *StreamDecoder) Flush() string {
	text := d.t.decodeRaw(d.window, d.skip, d.atStart, true)
	if strings.HasPrefix(text, d.accepted) {
		d.pending = append(d.pending, text[len(d.accepted):]...)
	}
	out := d.emit(true)
	d.window = d.window[:0]
	d.accepted = ""
	d.atStart = true
	d.pending = d.pending[:0]
	return out
}

// emit returns the pending text that clean-up can no longer change.
func (d *StreamDecoder) emit(all bool) string {
	if !d.t.cleanUp {
		s := string(d.pending)
		d.pending = d.pending[:0]
		return s
	}
	cut := len(d.pending)
	if !all {
		for cut > 0 && inCleanUpAlphabet(d.pending[cut-1]) {
			cut--
		}
	}
	s := cleanUpSpaces(string(d.pending[:cut]))
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return s
}
