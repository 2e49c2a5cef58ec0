package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Hand-written matchers for the three pre-tokenizer regexes that nearly every
// byte-level BPE uses. They return exactly the matches regexp2 returns for the same
// pattern (scan_test.go checks this on the reference strings and by fuzzing), at a
// fraction of the cost: regexp2 converts the text to runes and allocates a Match per
// match. Classes follow regexp2: \s is unicode.IsSpace, \p{L} unicode.IsLetter,
// \p{N} unicode.IsNumber, and (?i:'s|...) folds ASCII letters only (no other
// character lower-cases to s, t, r, e, v, m, l or d).

const (
	// llama3Regex is Llama-3's Split pattern (numbers in groups of up to three).
	llama3Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwen2Regex is Qwen2/Qwen3's Split pattern (single digits).
	qwen2Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// gpt2Regex is the pattern of the ByteLevel pre-tokenizer with use_regex.
	gpt2Regex = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

const (
	clsOther = iota
	clsLetter
	clsNumber
	clsSpace
)

type scanKind uint8

const (
	scanLlama3 scanKind = iota
	scanQwen2
	scanGPT2
)

// scanPattern is a pattern implemented by hand.
type scanPattern struct {
	kind scanKind
	src  string
}

// fastPattern returns the hand-written matcher for a known regex, or nil.
func fastPattern(src string) pattern {
	switch src {
	case llama3Regex:
		return &scanPattern{scanLlama3, src}
	case qwen2Regex:
		return &scanPattern{scanQwen2, src}
	case gpt2Regex:
		return &scanPattern{scanGPT2, src}
	}
	return nil
}

// asciiClass holds the class of each ASCII byte; it is built once and never written.
var asciiClass = func() (t [128]uint8) {
	for c := range 128 {
		r := rune(c)
		switch {
		case unicode.IsLetter(r):
			t[c] = clsLetter
		case unicode.IsNumber(r):
			t[c] = clsNumber
		case unicode.IsSpace(r):
			t[c] = clsSpace
		default:
			t[c] = clsOther
		}
	}
	return t
}()

// classAt returns the class and size of the character at s[i].
func classAt(s []byte, i int) (uint8, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, size := utf8.DecodeRune(s[i:])
	switch {
	case unicode.IsLetter(r):
		return clsLetter, size
	case unicode.IsNumber(r):
		return clsNumber, size
	case unicode.IsSpace(r):
		return clsSpace, size
	}
	return clsOther, size
}

// runOf returns the end of the run of class cls starting at i.
func runOf(s []byte, i int, cls uint8) int {
	for i < len(s) {
		c, size := classAt(s, i)
		if c != cls {
			break
		}
		i += size
	}
	return i
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// contraction returns the length of 's|'t|'re|'ve|'m|'ll|'d at s[i] (s[i] == '\”),
// or 0.
func contraction(s []byte, i int, fold bool) int {
	if i+1 >= len(s) {
		return 0
	}
	c := s[i+1]
	if fold {
		c = lower(c)
	}
	switch c {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v', 'l':
		if i+2 >= len(s) {
			return 0
		}
		c2 := s[i+2]
		if fold {
			c2 = lower(c2)
		}
		if (c == 'l' && c2 == 'l') || (c != 'l' && c2 == 'e') {
			return 3
		}
	}
	return 0
}

// spaceMatch handles the white-space alternatives at i (a white-space character):
// withNewline selects Llama-3's \s*[\r\n]+ before \s+(?!\S) and \s+.
func spaceMatch(s []byte, i int, withNewline bool) int {
	j := runOf(s, i, clsSpace)
	if withNewline {
		for k := j - 1; k >= i; k-- {
			if s[k] == '\r' || s[k] == '\n' {
				return k + 1
			}
		}
	}
	if j == len(s) {
		return j
	}
	// Back off one character so that the next one is white space.
	_, last := utf8.DecodeLastRune(s[i:j])
	if j-last > i {
		return j - last
	}
	return j
}

func (p *scanPattern) find(s []byte, out []span) []span {
	for i := 0; i < len(s); {
		var end int
		if p.kind == scanGPT2 {
			end = p.gpt2At(s, i)
		} else {
			end = p.llamaAt(s, i)
		}
		out = append(out, span{int32(i), int32(end)})
		i = end
	}
	return out
}

// llamaAt returns the end of the match starting at i for the Llama-3 and Qwen2
// patterns. Every character starts a match, so matches tile the text.
func (p *scanPattern) llamaAt(s []byte, i int) int {
	if s[i] == '\'' {
		if n := contraction(s, i, true); n > 0 {
			return i + n
		}
	}
	cls, size := classAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if cls == clsLetter {
		return runOf(s, i, clsLetter)
	}
	if cls != clsNumber && s[i] != '\r' && s[i] != '\n' && i+size < len(s) {
		if c2, _ := classAt(s, i+size); c2 == clsLetter {
			return runOf(s, i+size, clsLetter)
		}
	}
	// \p{N}{1,3} or \p{N}
	if cls == clsNumber {
		end := i + size
		if p.kind == scanLlama3 {
			for k := 1; k < 3 && end < len(s); k++ {
				c2, sz := classAt(s, end)
				if c2 != clsNumber {
					break
				}
				end += sz
			}
		}
		return end
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); c2 == clsOther {
			start = i + 1
			cls = clsOther
		}
	}
	if cls == clsOther {
		end := runOf(s, start, clsOther)
		for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
			end++
		}
		return end
	}
	// \s*[\r\n]+|\s+(?!\S)|\s+
	return spaceMatch(s, i, true)
}

// gpt2At returns the end of the match starting at i for the GPT-2 pattern.
func (p *scanPattern) gpt2At(s []byte, i int) int {
	if s[i] == '\'' {
		if n := contraction(s, i, false); n > 0 {
			return i + n
		}
	}
	cls, _ := classAt(s, i)
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); c2 != clsSpace {
			start = i + 1
			cls = c2
		}
	}
	if cls != clsSpace {
		return runOf(s, start, cls)
	}
	return spaceMatch(s, i, false)
}
