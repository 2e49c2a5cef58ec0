package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normStr is text on its way through the normalizers and pre-tokenizers, with,
// when offsets are wanted, the byte span of the original input that produced each
// of its bytes (os[i], oe[i]). Without offsets os and oe stay nil.
type normStr struct {
	s      []byte
	os, oe []int32
	track  bool
}

func (n *normStr) reset(track bool) {
	n.s = n.s[:0]
	n.os = n.os[:0]
	n.oe = n.oe[:0]
	n.track = track
}

// setOriginal loads text whose byte i comes from original bytes [base+i, base+i+1).
func (n *normStr) setOriginal(text string, base int, track bool) {
	n.reset(track)
	n.s = append(n.s, text...)
	if track {
		for i := range len(text) {
			n.os = append(n.os, int32(base+i))
			n.oe = append(n.oe, int32(base+i+1))
		}
	}
}

// add appends bytes b, all produced by the original span [o0, o1).
func (n *normStr) add(b []byte, o0, o1 int32) {
	n.s = append(n.s, b...)
	if n.track {
		for range b {
			n.os = append(n.os, o0)
			n.oe = append(n.oe, o1)
		}
	}
}

// addStr is add for a string.
func (n *normStr) addStr(b string, o0, o1 int32) {
	n.s = append(n.s, b...)
	if n.track {
		for range len(b) {
			n.os = append(n.os, o0)
			n.oe = append(n.oe, o1)
		}
	}
}

// copyFrom appends src[a:b] keeping its alignment.
func (n *normStr) copyFrom(src *normStr, a, b int) {
	n.s = append(n.s, src.s[a:b]...)
	if n.track {
		n.os = append(n.os, src.os[a:b]...)
		n.oe = append(n.oe, src.oe[a:b]...)
	}
}

// span returns the original span of src bytes [a, b) (b > a).
func (n *normStr) span(a, b int) (int32, int32) {
	if !n.track || b <= a {
		return 0, 0
	}
	return n.os[a], n.oe[b-1]
}

// normalizer rewrites src into dst and reports whether it did; when it returns
// false dst is untouched and src is the result.
type normalizer interface {
	apply(dst, src *normStr) bool
}

// runNormalizer applies nz to *cur using *tmp as the other buffer, swapping so that
// *cur holds the result.
func runNormalizer(nz normalizer, cur, tmp **normStr) {
	(*tmp).reset((*cur).track)
	if nz.apply(*tmp, *cur) {
		*cur, *tmp = *tmp, *cur
	}
}

type seqNormalizer struct{ list []normalizer }

func (q *seqNormalizer) apply(dst, src *normStr) bool {
	// Ping-pong between src and dst; make sure the result ends in dst.
	cur, tmp := src, dst
	changed := false
	for _, nz := range q.list {
		tmp.reset(cur.track)
		if nz.apply(tmp, cur) {
			cur, tmp = tmp, cur
			changed = true
		}
	}
	if !changed {
		return false
	}
	if cur != dst {
		// The result is in src's storage: copy it over.
		dst.reset(src.track)
		dst.copyFrom(cur, 0, len(cur.s))
	}
	return true
}

// unicodeNormalizer is NFC, NFD, NFKC or NFKD.
type unicodeNormalizer struct{ form norm.Form }

func (u *unicodeNormalizer) apply(dst, src *normStr) bool {
	if u.form.IsNormal(src.s) {
		return false
	}
	var it norm.Iter
	it.Init(u.form, src.s)
	for !it.Done() {
		p0 := it.Pos()
		seg := it.Next()
		p1 := it.Pos()
		o0, o1 := src.span(p0, p1)
		dst.add(seg, o0, o1)
	}
	return true
}

type lowercaseNormalizer struct{}

func (lowercaseNormalizer) apply(dst, src *normStr) bool {
	var tmp [utf8.UTFMax]byte
	for i := 0; i < len(src.s); {
		r, size := utf8.DecodeRune(src.s[i:])
		o0, o1 := src.span(i, i+size)
		l := unicode.ToLower(r)
		if r == utf8.RuneError && size == 1 {
			dst.add(src.s[i:i+1], o0, o1)
		} else {
			n := utf8.EncodeRune(tmp[:], l)
			dst.add(tmp[:n], o0, o1)
		}
		i += size
	}
	return true
}

// stripNormalizer removes leading and/or trailing white space.
type stripNormalizer struct{ left, right bool }

func (s *stripNormalizer) apply(dst, src *normStr) bool {
	a, b := 0, len(src.s)
	if s.left {
		for a < b {
			r, size := utf8.DecodeRune(src.s[a:])
			if !unicode.IsSpace(r) {
				break
			}
			a += size
		}
	}
	if s.right {
		for b > a {
			r, size := utf8.DecodeLastRune(src.s[a:b])
			if !unicode.IsSpace(r) {
				break
			}
			b -= size
		}
	}
	if a == 0 && b == len(src.s) {
		return false
	}
	dst.copyFrom(src, a, b)
	return true
}

// replaceNormalizer replaces every match of a literal or regex pattern.
type replaceNormalizer struct {
	pat     pattern
	content string
}

func (r *replaceNormalizer) apply(dst, src *normStr) bool {
	var ms []span
	ms = r.pat.find(src.s, ms)
	if len(ms) == 0 {
		return false
	}
	prev := 0
	for _, m := range ms {
		dst.copyFrom(src, prev, int(m.a))
		o0, o1 := src.span(int(m.a), int(m.b))
		dst.addStr(r.content, o0, o1)
		prev = int(m.b)
	}
	dst.copyFrom(src, prev, len(src.s))
	return true
}

// prependNormalizer prepends a string to non-empty text; the new bytes are
// aligned with the first character.
type prependNormalizer struct{ prefix string }

func (p *prependNormalizer) apply(dst, src *normStr) bool {
	if len(src.s) == 0 {
		return false
	}
	_, size := utf8.DecodeRune(src.s)
	o0, o1 := src.span(0, size)
	dst.addStr(p.prefix, o0, o1)
	dst.copyFrom(src, 0, len(src.s))
	return true
}

// normalizerString applies nz to a plain string (used for added tokens whose
// content is normalized before matching).
func normalizerString(nz normalizer, s string) string {
	a := &normStr{}
	b := &normStr{}
	a.setOriginal(s, 0, false)
	runNormalizer(nz, &a, &b)
	return string(a.s)
}

// patternJSON is {"String": "..."} or {"Regex": "..."}.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func buildNormalizer(raw json.RawMessage, field string) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c compJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	switch c.Type {
	case "Sequence":
		q := &seqNormalizer{}
		for i, sub := range c.Normalizers {
			nz, err := buildNormalizer(sub, fmt.Sprintf("%s.normalizers[%d]", field, i))
			if err != nil {
				return nil, err
			}
			if nz != nil {
				q.list = append(q.list, nz)
			}
		}
		return q, nil
	case "NFC":
		return &unicodeNormalizer{norm.NFC}, nil
	case "NFD":
		return &unicodeNormalizer{norm.NFD}, nil
	case "NFKC":
		return &unicodeNormalizer{norm.NFKC}, nil
	case "NFKD":
		return &unicodeNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Strip":
		left, right := true, true
		if c.StripLeft != nil {
			left = *c.StripLeft
		}
		if c.StripRight != nil {
			right = *c.StripRight
		}
		return &stripNormalizer{left, right}, nil
	case "Replace":
		p, err := buildPattern(c.Pattern, field+".pattern")
		if err != nil {
			return nil, err
		}
		return &replaceNormalizer{pat: p, content: c.Content}, nil
	case "Prepend":
		return &prependNormalizer{prefix: c.Prepend}, nil
	default:
		return nil, fmt.Errorf("%s: unsupported normalizer type %q (supported: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend)", field, c.Type)
	}
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}
