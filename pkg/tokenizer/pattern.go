package tokenizer

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// span is a byte range [a, b).
type span struct{ a, b int32 }

// pattern finds the non-overlapping matches of a Split or Replace pattern, leftmost
// first, appending them to out. Empty matches are not reported.
type pattern interface {
	find(s []byte, out []span) []span
}

// literalPattern matches a fixed string.
type literalPattern struct{ lit []byte }

func (p *literalPattern) find(s []byte, out []span) []span {
	if len(p.lit) == 0 {
		return out
	}
	for i := 0; i <= len(s)-len(p.lit); {
		j := bytes.Index(s[i:], p.lit)
		if j < 0 {
			break
		}
		out = append(out, span{int32(i + j), int32(i + j + len(p.lit))})
		i += j + len(p.lit)
	}
	return out
}

// regexPattern runs a regular expression with look-around (Oniguruma syntax as
// used by tokenizer.json) through regexp2.
type regexPattern struct {
	re  *regexp2.Regexp
	src string
}

func (p *regexPattern) find(s []byte, out []span) []span {
	if len(s) == 0 {
		return out
	}
	runes := make([]rune, 0, len(s))
	offs := make([]int32, 0, len(s)+1)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRune(s[i:])
		runes = append(runes, r)
		offs = append(offs, int32(i))
		i += size
	}
	offs = append(offs, int32(len(s)))
	m, err := p.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if m.Length > 0 {
			out = append(out, span{offs[m.Index], offs[m.Index+m.Length]})
		}
		m, err = p.re.FindNextMatch(m)
	}
	// regexp2 only fails on a match timeout, which is not set.
	return out
}

func buildPattern(p *patternJSON, field string) (pattern, error) {
	if p == nil {
		return nil, fmt.Errorf("%s: missing", field)
	}
	switch {
	case p.String != nil:
		return &literalPattern{lit: []byte(*p.String)}, nil
	case p.Regex != nil:
		if fast := fastPattern(*p.Regex); fast != nil {
			return fast, nil
		}
		return compileRegex(*p.Regex, field)
	default:
		return nil, fmt.Errorf("%s: expected {\"String\": ...} or {\"Regex\": ...}", field)
	}
}

func compileRegex(src, field string) (*regexPattern, error) {
	re, err := regexp2.Compile(src, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("%s: compiling regex %q: %w", field, src, err)
	}
	return &regexPattern{re: re, src: src}, nil
}
