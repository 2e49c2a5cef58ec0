package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// preTokenizer splits the pieces of ns further. It may rewrite ns (Metaspace, a
// ByteLevel prefix space), in which case it returns the buffer now holding the text.
// first says whether ns is the first section of the input (Metaspace's "first").
type preTokenizer interface {
	split(st *encState, ns *normStr, pieces []span, first bool) (*normStr, []span)
}

type seqPreTokenizer struct{ list []preTokenizer }

func (q *seqPreTokenizer) split(st *encState, ns *normStr, pieces []span, first bool) (*normStr, []span) {
	for _, p := range q.list {
		ns, pieces = p.split(st, ns, pieces, first)
	}
	return ns, pieces
}

// splitBehavior is how a Split pre-tokenizer treats the matched delimiters.
type splitBehavior uint8

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

func parseBehavior(s, field string) (splitBehavior, error) {
	switch s {
	case "Removed":
		return behaviorRemoved, nil
	case "Isolated":
		return behaviorIsolated, nil
	case "MergedWithPrevious":
		return behaviorMergedWithPrevious, nil
	case "MergedWithNext":
		return behaviorMergedWithNext, nil
	case "Contiguous":
		return behaviorContiguous, nil
	}
	return 0, fmt.Errorf("%s: unsupported split behavior %q (supported: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)", field, s)
}

type splitPreTokenizer struct {
	pat      pattern
	behavior splitBehavior
	invert   bool
}

// part is a piece of a split and whether it matched the pattern.
type part struct {
	span
	match bool
}

// splitPieces applies a delimiter behaviour to the matches ms found in piece p
// (offsets relative to ns), appending the resulting pieces to out. It follows the
// tokenizers library: the piece is cut into alternating non-matching and matching
// parts (flipped by invert), which are then dropped, kept or merged with a
// neighbour; empty pieces are dropped.
func splitPieces(p span, ms []span, behavior splitBehavior, invert bool, out []span) []span {
	parts := make([]part, 0, 2*len(ms)+1)
	prev := p.a
	for _, m := range ms {
		if m.a > prev {
			parts = append(parts, part{span{prev, m.a}, invert})
		}
		parts = append(parts, part{m, !invert})
		prev = m.b
	}
	if prev < p.b {
		parts = append(parts, part{span{prev, p.b}, invert})
	}
	start := len(out)
	switch behavior {
	case behaviorRemoved:
		for _, q := range parts {
			if !q.match {
				out = append(out, q.span)
			}
		}
	case behaviorIsolated:
		for _, q := range parts {
			out = append(out, q.span)
		}
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, q := range parts {
			if q.match && !prevMatch && len(out) > start {
				out[len(out)-1].b = q.b
			} else {
				out = append(out, q.span)
			}
			prevMatch = q.match
		}
	case behaviorMergedWithNext:
		// Walk backwards: a match joins the part after it unless that one matched.
		nextMatch := false
		for k := len(parts) - 1; k >= 0; k-- {
			q := parts[k]
			if q.match && !nextMatch && len(out) > start {
				out[len(out)-1].a = q.a
			} else {
				out = append(out, q.span)
			}
			nextMatch = q.match
		}
		slices.Reverse(out[start:])
	case behaviorContiguous:
		prevMatch := false
		for _, q := range parts {
			if q.match == prevMatch && len(out) > start {
				out[len(out)-1].b = q.b
			} else {
				out = append(out, q.span)
			}
			prevMatch = q.match
		}
	}
	return out
}

func (sp *splitPreTokenizer) split(st *encState, ns *normStr, pieces []span, first bool) (*normStr, []span) {
	out := st.pieces2[:0]
	for _, p := range pieces {
		ms := sp.pat.find(ns.s[p.a:p.b], st.matches[:0])
		for k := range ms {
			ms[k].a += p.a
			ms[k].b += p.a
		}
		st.matches = ms
		if sp.behavior == behaviorIsolated && !sp.invert {
			// Fast path: the fast patterns tile the text, so matches are the pieces.
			prev := p.a
			for _, m := range ms {
				if m.a > prev {
					out = append(out, span{prev, m.a})
				}
				out = append(out, m)
				prev = m.b
			}
			if prev < p.b {
				out = append(out, span{prev, p.b})
			}
			continue
		}
		out = splitPieces(p, ms, sp.behavior, sp.invert, out)
	}
	st.pieces2 = pieces
	return ns, out
}

// byteLevelPreTokenizer marks the text for the GPT-2 byte-to-unicode mapping (done
// by the model on raw bytes), optionally prefixing a space and splitting with the
// GPT-2 regex.
type byteLevelPreTokenizer struct {
	addPrefixSpace bool
	re             pattern // nil without use_regex
}

func (bl *byteLevelPreTokenizer) split(st *encState, ns *normStr, pieces []span, first bool) (*normStr, []span) {
	if bl.addPrefixSpace {
		ns, pieces = prefixPieces(st, ns, pieces, " ", func(p []byte) bool { return len(p) == 0 || p[0] != ' ' }, nil)
	}
	if bl.re == nil {
		return ns, pieces
	}
	out := st.pieces2[:0]
	for _, p := range pieces {
		ms := bl.re.find(ns.s[p.a:p.b], st.matches[:0])
		for k := range ms {
			ms[k].a += p.a
			ms[k].b += p.a
		}
		st.matches = ms
		out = splitPieces(p, ms, behaviorIsolated, false, out)
	}
	st.pieces2 = pieces
	return ns, out
}

// prefixPieces rebuilds ns with prefix inserted before every piece for which want
// returns true, and each byte of the piece replaced as replace says (nil: kept).
func prefixPieces(st *encState, ns *normStr, pieces []span, prefix string, want func([]byte) bool, replace func(dst *normStr, src *normStr, a, b int)) (*normStr, []span) {
	dst := st.other(ns)
	dst.reset(ns.track)
	out := st.pieces2[:0]
	for _, p := range pieces {
		start := int32(len(dst.s))
		if want(ns.s[p.a:p.b]) {
			o0, o1 := int32(0), int32(0)
			if p.b > p.a {
				_, size := utf8.DecodeRune(ns.s[p.a:p.b])
				o0, o1 = ns.span(int(p.a), int(p.a)+size)
			}
			dst.addStr(prefix, o0, o1)
		}
		if replace != nil {
			replace(dst, ns, int(p.a), int(p.b))
		} else {
			dst.copyFrom(ns, int(p.a), int(p.b))
		}
		out = append(out, span{start, int32(len(dst.s))})
	}
	st.pieces2 = pieces
	return dst, out
}

// metaspacePreTokenizer replaces spaces with the replacement character, prepends
// one according to the scheme, and optionally splits before each replacement.
type metaspacePreTokenizer struct {
	replacement string
	scheme      string // "always", "first" or "never"
	splitOn     bool
}

func (m *metaspacePreTokenizer) split(st *encState, ns *normStr, pieces []span, first bool) (*normStr, []span) {
	rep := m.replacement
	want := func(p []byte) bool {
		if len(p) > 0 && strings.HasPrefix(string(p), rep) {
			return false
		}
		if len(p) > 0 && p[0] == ' ' {
			// The space becomes the replacement below.
			return false
		}
		switch m.scheme {
		case "always":
			return true
		case "first":
			return first
		}
		return false
	}
	firstPiece := true
	wantOnce := func(p []byte) bool {
		ok := want(p)
		if m.scheme == "first" && !firstPiece {
			ok = false
		}
		firstPiece = false
		return ok
	}
	replace := func(dst, src *normStr, a, b int) {
		for i := a; i < b; i++ {
			if src.s[i] == ' ' {
				o0, o1 := src.span(i, i+1)
				dst.addStr(rep, o0, o1)
			} else {
				dst.copyFrom(src, i, i+1)
			}
		}
	}
	ns, pieces = prefixPieces(st, ns, pieces, rep, wantOnce, replace)
	if !m.splitOn {
		return ns, pieces
	}
	lit := literalPattern{lit: []byte(rep)}
	out := st.pieces2[:0]
	for _, p := range pieces {
		ms := lit.find(ns.s[p.a:p.b], st.matches[:0])
		for k := range ms {
			ms[k].a += p.a
			ms[k].b += p.a
		}
		st.matches = ms
		out = splitPieces(p, ms, behaviorMergedWithNext, false, out)
	}
	st.pieces2 = pieces
	return ns, out
}

// digitsPreTokenizer splits digits from the rest (each digit alone when individual).
type digitsPreTokenizer struct{ individual bool }

func (d *digitsPreTokenizer) split(st *encState, ns *normStr, pieces []span, first bool) (*normStr, []span) {
	out := st.pieces2[:0]
	for _, p := range pieces {
		ms := st.matches[:0]
		for i := int(p.a); i < int(p.b); {
			c, size := classAt(ns.s[:p.b], i)
			if c == clsNumber {
				j := i + size
				if !d.individual {
					j = runOf(ns.s[:p.b], i, clsNumber)
				}
				ms = append(ms, span{int32(i), int32(j)})
				i = j
				continue
			}
			i += size
		}
		st.matches = ms
		b := behaviorIsolated
		if !d.individual {
			b = behaviorContiguous
		}
		out = splitPieces(p, ms, b, false, out)
	}
	st.pieces2 = pieces
	return ns, out
}

// preTokInfo collects what the rest of the pipeline needs to know.
type preTokInfo struct {
	byteLevel bool
}

func buildPreTokenizer(raw json.RawMessage, field string, info *preTokInfo, last bool) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c compJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if info.byteLevel {
		return nil, fmt.Errorf("%s: pre-tokenizer %q after ByteLevel is not supported (ByteLevel must come last)", field, c.Type)
	}
	switch c.Type {
	case "Sequence":
		q := &seqPreTokenizer{}
		for i, sub := range c.Pretokenizers {
			p, err := buildPreTokenizer(sub, fmt.Sprintf("%s.pretokenizers[%d]", field, i), info, last && i == len(c.Pretokenizers)-1)
			if err != nil {
				return nil, err
			}
			if p != nil {
				q.list = append(q.list, p)
			}
		}
		return q, nil
	case "Split":
		p, err := buildPattern(c.Pattern, field+".pattern")
		if err != nil {
			return nil, err
		}
		b, err := parseBehavior(c.Behavior, field+".behavior")
		if err != nil {
			return nil, err
		}
		return &splitPreTokenizer{pat: p, behavior: b, invert: c.Invert}, nil
	case "ByteLevel":
		bl := &byteLevelPreTokenizer{addPrefixSpace: c.AddPrefixSpace != nil && *c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			bl.re = fastPattern(gpt2Regex)
		}
		info.byteLevel = true
		return bl, nil
	case "Metaspace":
		m := &metaspacePreTokenizer{replacement: c.Replacement, scheme: "always", splitOn: true}
		if m.replacement == "" {
			m.replacement = "▁"
		}
		if c.Split != nil {
			m.splitOn = *c.Split
		}
		switch {
		case c.PrependScheme != "":
			m.scheme = c.PrependScheme
		case c.AddPrefixSpace != nil && !*c.AddPrefixSpace:
			m.scheme = "never"
		}
		if m.scheme != "always" && m.scheme != "first" && m.scheme != "never" {
			return nil, fmt.Errorf("%s.prepend_scheme: unsupported value %q (expected always, first or never)", field, m.scheme)
		}
		return m, nil
	case "Digits":
		return &digitsPreTokenizer{individual: c.IndividualDigits}, nil
	default:
		return nil, fmt.Errorf("%s: unsupported pre-tokenizer type %q (supported: Sequence, Split, ByteLevel, Metaspace, Digits)", field, c.Type)
	}
}
