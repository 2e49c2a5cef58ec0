package tokenizer

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// The vocabulary and merge list are most of a tokenizer.json (9 MB for Llama-3), and
// they sit on the start-up path of every command. encoding/json decodes them through
// reflection into maps of interfaces; these hand-written scanners read exactly the two
// shapes that occur ({"token": id, ...} and ["a b", ...] or [["a", "b"], ...]) in one
// pass without intermediate values.

// jsonScanner walks a JSON value held in memory.
type jsonScanner struct {
	b   []byte
	pos int
	buf []byte // scratch for unescaping
}

func (s *jsonScanner) errf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *jsonScanner) skipSpace() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// expect consumes byte c after optional white space.
func (s *jsonScanner) expect(c byte) error {
	s.skipSpace()
	if s.pos >= len(s.b) || s.b[s.pos] != c {
		if s.pos >= len(s.b) {
			return s.errf("expected %q, found end of input", c)
		}
		return s.errf("expected %q, found %q", c, s.b[s.pos])
	}
	s.pos++
	return nil
}

// peek returns the next non-space byte without consuming it (0 at the end).
func (s *jsonScanner) peek() byte {
	s.skipSpace()
	if s.pos >= len(s.b) {
		return 0
	}
	return s.b[s.pos]
}

// strView is str returning, for a string without escapes, a view of the input
// bytes instead of a copy; the result must not outlive the input.
func (s *jsonScanner) strView() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start := s.pos
	for s.pos < len(s.b) {
		c := s.b[s.pos]
		if c == '"' {
			out := unsafe.String(&s.b[start], s.pos-start)
			if s.pos == start {
				out = ""
			}
			s.pos++
			return out, nil
		}
		if c == '\\' {
			return s.strEscaped(start)
		}
		if c < 0x20 {
			return "", s.errf("control character in string")
		}
		s.pos++
	}
	return "", s.errf("unterminated string")
}

// str reads a JSON string and returns it as a Go string that owns its bytes.
func (s *jsonScanner) str() (string, error) {
	v, err := s.strView()
	return strings.Clone(v), err
}

func (s *jsonScanner) strEscaped(start int) (string, error) {
	s.buf = append(s.buf[:0], s.b[start:s.pos]...)
	for s.pos < len(s.b) {
		c := s.b[s.pos]
		switch {
		case c == '"':
			s.pos++
			return string(s.buf), nil
		case c == '\\':
			if s.pos+1 >= len(s.b) {
				return "", s.errf("unterminated escape")
			}
			e := s.b[s.pos+1]
			s.pos += 2
			switch e {
			case '"', '\\', '/':
				s.buf = append(s.buf, e)
			case 'b':
				s.buf = append(s.buf, '\b')
			case 'f':
				s.buf = append(s.buf, '\f')
			case 'n':
				s.buf = append(s.buf, '\n')
			case 'r':
				s.buf = append(s.buf, '\r')
			case 't':
				s.buf = append(s.buf, '\t')
			case 'u':
				r, err := s.hex4()
				if err != nil {
					return "", err
				}
				if utf16.IsSurrogate(r) {
					// A high surrogate must be followed by \uDC00-\uDFFF; anything
					// else decodes to U+FFFD, as encoding/json does.
					r2 := rune(-1)
					if s.pos+1 < len(s.b) && s.b[s.pos] == '\\' && s.b[s.pos+1] == 'u' {
						save := s.pos
						s.pos += 2
						var err error
						if r2, err = s.hex4(); err != nil {
							return "", err
						}
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							r = d
						} else {
							s.pos = save
							r = utf8.RuneError
						}
					} else {
						r = utf8.RuneError
					}
				}
				s.buf = utf8.AppendRune(s.buf, r)
			default:
				return "", s.errf("invalid escape \\%c", e)
			}
		case c < 0x20:
			return "", s.errf("control character in string")
		default:
			s.buf = append(s.buf, c)
			s.pos++
		}
	}
	return "", s.errf("unterminated string")
}

func (s *jsonScanner) hex4() (rune, error) {
	if s.pos+4 > len(s.b) {
		return 0, s.errf("short \\u escape")
	}
	v, err := strconv.ParseUint(string(s.b[s.pos:s.pos+4]), 16, 32)
	if err != nil {
		return 0, s.errf("invalid \\u escape %q", s.b[s.pos:s.pos+4])
	}
	s.pos += 4
	return rune(v), nil
}

// integer reads a non-negative JSON integer that fits in int32.
func (s *jsonScanner) integer() (int32, error) {
	s.skipSpace()
	start := s.pos
	var v int64
	for s.pos < len(s.b) && s.b[s.pos] >= '0' && s.b[s.pos] <= '9' {
		v = v*10 + int64(s.b[s.pos]-'0')
		if v > 1<<31-1 {
			return 0, s.errf("integer out of range")
		}
		s.pos++
	}
	if s.pos == start {
		return 0, s.errf("expected a non-negative integer")
	}
	if s.pos < len(s.b) && (s.b[s.pos] == '.' || s.b[s.pos] == 'e' || s.b[s.pos] == 'E') {
		return 0, s.errf("expected an integer, found a number with a fraction or exponent")
	}
	return int32(v), nil
}

// parseVocab reads {"token": id, ...}.
func parseVocab(raw []byte) (map[string]int32, error) {
	s := &jsonScanner{b: raw}
	if err := s.expect('{'); err != nil {
		return nil, err
	}
	m := make(map[string]int32, len(raw)/16)
	if s.peek() == '}' {
		s.pos++
		return m, nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return nil, err
		}
		if err := s.expect(':'); err != nil {
			return nil, err
		}
		v, err := s.integer()
		if err != nil {
			return nil, fmt.Errorf("id of token %q: %w", k, err)
		}
		m[k] = v
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return m, nil
		default:
			return nil, s.errf("expected ',' or '}' after the id of %q", k)
		}
	}
}

// parseMerges reads ["a b", ...] (tokenizers < 0.20) or [["a", "b"], ...]. The
// strings passed to fn may be views of raw.
func parseMerges(raw []byte, fn func(i int, a, b string) error) error {
	s := &jsonScanner{b: raw}
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		return nil
	}
	for i := 0; ; i++ {
		var a, b string
		switch s.peek() {
		case '"':
			line, err := s.strView()
			if err != nil {
				return fmt.Errorf("merge %d: %w", i, err)
			}
			sp := -1
			for j := 0; j < len(line); j++ {
				if line[j] == ' ' {
					if sp >= 0 {
						return fmt.Errorf("merge %d %q: expected exactly one space between the two tokens", i, line)
					}
					sp = j
				}
			}
			if sp < 0 {
				return fmt.Errorf("merge %d %q: expected two tokens separated by a space", i, line)
			}
			a, b = line[:sp], line[sp+1:]
		case '[':
			s.pos++
			var err error
			if a, err = s.strView(); err != nil {
				return fmt.Errorf("merge %d: %w", i, err)
			}
			if err := s.expect(','); err != nil {
				return fmt.Errorf("merge %d: %w", i, err)
			}
			if b, err = s.strView(); err != nil {
				return fmt.Errorf("merge %d: %w", i, err)
			}
			if err := s.expect(']'); err != nil {
				return fmt.Errorf("merge %d: expected a pair: %w", i, err)
			}
		default:
			return fmt.Errorf("merge %d: %w", i, s.errf("expected a string or a [a, b] pair"))
		}
		if err := fn(i, a, b); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			return nil
		default:
			return fmt.Errorf("merge %d: %w", i, s.errf("expected ',' or ']'"))
		}
	}
}

// skipValue skips one JSON value of any kind.
func (s *jsonScanner) skipValue() error {
	switch s.peek() {
	case '"':
		// Skip a string without unescaping it: find the next quote not
		// preceded by an odd number of backslashes.
		s.pos++
		for {
			j := bytes.IndexByte(s.b[s.pos:], '"')
			if j < 0 {
				s.pos = len(s.b)
				return s.errf("unterminated string")
			}
			q := s.pos + j
			bs := 0
			for k := q - 1; k >= s.pos && s.b[k] == '\\'; k-- {
				bs++
			}
			s.pos = q + 1
			if bs%2 == 0 {
				return nil
			}
		}
	case '{', '[':
		// Count brackets outside strings.
		depth := 0
		for s.pos < len(s.b) {
			c := s.b[s.pos]
			switch c {
			case '"':
				if err := s.skipValue(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.pos++
					return nil
				}
			}
			s.pos++
		}
		return s.errf("unterminated object or array")
	case 0:
		return s.errf("unexpected end of input")
	default:
		// A number, true, false or null.
		start := s.pos
		for s.pos < len(s.b) {
			switch s.b[s.pos] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if s.pos == start {
					return s.errf("expected a value")
				}
				return nil
			}
			s.pos++
		}
		return nil
	}
}

// objectFields splits a JSON object into its members' raw values (the last one
// wins for repeated keys). Values are not validated beyond their extent; each is
// decoded later by its consumer.
func objectFields(raw []byte) (map[string][]byte, error) {
	s := &jsonScanner{b: raw}
	if err := s.expect('{'); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	if s.peek() == '}' {
		s.pos++
		return out, nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return nil, err
		}
		if err := s.expect(':'); err != nil {
			return nil, err
		}
		s.skipSpace()
		start := s.pos
		if err := s.skipValue(); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = raw[start:s.pos]
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			if s.peek() != 0 {
				return nil, s.errf("unexpected data after the object")
			}
			return out, nil
		default:
			return nil, s.errf("expected ',' or '}' after member %q", k)
		}
	}
}
