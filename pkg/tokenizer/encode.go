package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unsafe"
)

// unsafeBytes views s as bytes without copying; the result must not be written.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// encState holds the scratch buffers of one encoding, reused through a sync.Pool so
// that encoding allocates only its result.
type encState struct {
	na, nb   normStr
	pieces   []span
	pieces2  []span
	matches  []span
	secs     []section
	subs     []section
	cands    []int32
	ids      []int32
	spans    []span // normalized offsets while a section is encoded, then original ones
	symID    []int32
	symEnd   []int32
	rk       []uint32
	nid      []int32
	heap     []uint64
	next     []int32
	prev     []int32
	alive    []bool
	keyBuf   []byte
	cache    map[string]cachedWord
	finalIDs []int32
	finalOff []span
}

// other returns the normStr buffer that is not ns.
func (st *encState) other(ns *normStr) *normStr {
	if ns == &st.na {
		return &st.nb
	}
	return &st.na
}

func (st *encState) emitCached(cw cachedWord, base int32) {
	start := base
	for k, id := range cw.ids {
		end := base + cw.ends[k]
		st.ids = append(st.ids, id)
		st.spans = append(st.spans, span{start, end})
		start = end
	}
}

func (t *Tokenizer) getState() *encState {
	if v := t.pool.Get(); v != nil {
		return v.(*encState)
	}
	return &encState{cache: make(map[string]cachedWord)}
}

// encodeText runs added-token splitting, normalization, pre-tokenization and the
// model over text, leaving ids and (when track) original byte spans in st.
func (t *Tokenizer) encodeText(st *encState, text string, track bool) {
	st.ids = st.ids[:0]
	st.spans = st.spans[:0]
	tb := unsafeBytes(text)
	st.secs, st.cands = t.rawAdded.split(t.added, tb, st.secs[:0], st.cands)
	for si, sec := range st.secs {
		if sec.tok >= 0 {
			st.ids = append(st.ids, t.added[sec.tok].id)
			st.spans = append(st.spans, span{sec.a, sec.b})
			continue
		}
		ns := &st.na
		ns.setOriginal(text[sec.a:sec.b], int(sec.a), track)
		if t.normalizer != nil {
			tmp := &st.nb
			runNormalizer(t.normalizer, &ns, &tmp)
		}
		if len(ns.s) == 0 {
			continue
		}
		subs := st.subs[:0]
		if t.normAdded != nil {
			subs, st.cands = t.normAdded.split(t.added, ns.s, subs, st.cands)
		} else {
			subs = append(subs, section{0, int32(len(ns.s)), -1})
		}
		st.subs = subs
		for j, sub := range subs {
			if sub.tok >= 0 {
				o0, o1 := ns.span(int(sub.a), int(sub.b))
				st.ids = append(st.ids, t.added[sub.tok].id)
				st.spans = append(st.spans, span{o0, o1})
				continue
			}
			n0 := len(st.ids)
			pieces := append(st.pieces[:0], span{sub.a, sub.b})
			cur := ns
			if t.preTok != nil {
				cur, pieces = t.preTok.split(st, cur, pieces, si == 0 && j == 0)
			}
			for _, p := range pieces {
				t.model.encodePiece(st, cur.s[p.a:p.b], p.a)
			}
			st.pieces = pieces
			if track {
				for k := n0; k < len(st.spans); k++ {
					o0, o1 := cur.span(int(st.spans[k].a), int(st.spans[k].b))
					st.spans[k] = span{o0, o1}
				}
			}
		}
	}
}

// Encode returns the token ids of text; with addSpecial the post-processor's
// special tokens (for example BOS) are added.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	ids, _ := t.encode(text, addSpecial, false)
	return ids
}

// EncodeOffsets is Encode that also returns, for each token, the byte range of text
// it came from. Tokens added by the post-processor get an empty range at their
// insertion point; tokens produced by a normalizer's additions (such as the "▁"
// prepended by SentencePiece tokenizers) share the range of the character they were
// attached to.
func (t *Tokenizer) EncodeOffsets(text string, addSpecial bool) (ids []int, offsets [][2]int) {
	return t.encode(text, addSpecial, true)
}

func (t *Tokenizer) encode(text string, addSpecial, track bool) ([]int, [][2]int) {
	st := t.getState()
	defer t.pool.Put(st)
	t.encodeText(st, text, track)
	ids, spans := st.ids, st.spans
	if t.post != nil {
		st.finalIDs, st.finalOff = t.post.process(t, ids, spans, len(text), addSpecial, track, st.finalIDs[:0], st.finalOff[:0])
		ids, spans = st.finalIDs, st.finalOff
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	if !track {
		return out, nil
	}
	offs := make([][2]int, len(spans))
	for i, s := range spans {
		offs[i] = [2]int{int(s.a), int(s.b)}
	}
	return out, offs
}

// postProcessor adds special tokens around the encoded sequence (and may adjust
// offsets).
type postProcessor interface {
	process(t *Tokenizer, ids []int32, spans []span, textLen int, addSpecial, track bool, outIDs []int32, outSpans []span) ([]int32, []span)
}

type templatePieceJSON struct {
	SpecialToken *struct {
		ID     string `json:"id"`
		TypeID int    `json:"type_id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID     string `json:"id"`
		TypeID int    `json:"type_id"`
	} `json:"Sequence"`
}

type specialTokenJSON struct {
	ID     string   `json:"id"`
	IDs    []int32  `json:"ids"`
	Tokens []string `json:"tokens"`
}

// templateProcessor is TemplateProcessing's single-sequence template: a list of
// special-token id lists with the sequence somewhere among them.
type templateProcessor struct {
	before, after []int32
}

func (tp *templateProcessor) process(t *Tokenizer, ids []int32, spans []span, textLen int, addSpecial, track bool, outIDs []int32, outSpans []span) ([]int32, []span) {
	if addSpecial {
		outIDs = append(outIDs, tp.before...)
		if track {
			for range tp.before {
				outSpans = append(outSpans, span{0, 0})
			}
		}
	}
	outIDs = append(outIDs, ids...)
	if track {
		outSpans = append(outSpans, spans...)
	}
	if addSpecial {
		outIDs = append(outIDs, tp.after...)
		if track {
			for range tp.after {
				outSpans = append(outSpans, span{int32(textLen), int32(textLen)})
			}
		}
	}
	return outIDs, outSpans
}

// byteLevelProcessor trims the spaces of byte-level tokens from their offsets when
// trim_offsets is set; ids are unchanged.
type byteLevelProcessor struct{ trim bool }

func (bp *byteLevelProcessor) process(t *Tokenizer, ids []int32, spans []span, textLen int, addSpecial, track bool, outIDs []int32, outSpans []span) ([]int32, []span) {
	outIDs = append(outIDs, ids...)
	if !track {
		return outIDs, outSpans
	}
	base := len(outSpans)
	outSpans = append(outSpans, spans...)
	if !bp.trim {
		return outIDs, outSpans
	}
	const space = "Ġ"
	for k, id := range ids {
		tok := t.tokens[id]
		if _, isAdded := t.addedID[id]; isAdded {
			continue
		}
		lead := 0
		for strings.HasPrefix(tok[lead*len(space):], space) {
			lead++
		}
		trail := 0
		for len(tok)-trail*len(space) >= len(space)*(lead+1) && strings.HasSuffix(tok[:len(tok)-trail*len(space)], space) {
			trail++
		}
		s := &outSpans[base+k]
		if s.a+int32(lead) <= s.b-int32(trail) {
			s.a += int32(lead)
			s.b -= int32(trail)
		}
	}
	return outIDs, outSpans
}

type seqProcessor struct{ list []postProcessor }

func (q *seqProcessor) process(t *Tokenizer, ids []int32, spans []span, textLen int, addSpecial, track bool, outIDs []int32, outSpans []span) ([]int32, []span) {
	curIDs, curSpans := ids, spans
	for _, p := range q.list {
		var nIDs []int32
		var nSpans []span
		nIDs, nSpans = p.process(t, curIDs, curSpans, textLen, addSpecial, track, nil, nil)
		curIDs, curSpans = nIDs, nSpans
	}
	return append(outIDs, curIDs...), append(outSpans, curSpans...)
}

func buildPostProcessor(raw json.RawMessage, field string, t *Tokenizer) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c compJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	switch c.Type {
	case "TemplateProcessing":
		tp := &templateProcessor{}
		seen := false
		for i, p := range c.Single {
			switch {
			case p.Sequence != nil:
				if p.Sequence.ID != "A" {
					return nil, fmt.Errorf("%s.single[%d]: sequence %q in the single template (expected A)", field, i, p.Sequence.ID)
				}
				if seen {
					return nil, fmt.Errorf("%s.single[%d]: sequence A appears twice", field, i)
				}
				seen = true
			case p.SpecialToken != nil:
				st, ok := c.SpecialTokens[p.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("%s.single[%d]: special token %q is not in special_tokens", field, i, p.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if id < 0 || int(id) >= len(t.tokens) {
						return nil, fmt.Errorf("%s.special_tokens[%q]: id %d is outside the vocabulary", field, p.SpecialToken.ID, id)
					}
				}
				if seen {
					tp.after = append(tp.after, st.IDs...)
				} else {
					tp.before = append(tp.before, st.IDs...)
				}
			default:
				return nil, fmt.Errorf("%s.single[%d]: expected SpecialToken or Sequence", field, i)
			}
		}
		if !seen {
			return nil, fmt.Errorf("%s.single: no Sequence A", field)
		}
		return tp, nil
	case "ByteLevel":
		return &byteLevelProcessor{trim: c.TrimOffsets == nil || *c.TrimOffsets}, nil
	case "Sequence":
		q := &seqProcessor{}
		for i, sub := range c.Processors {
			p, err := buildPostProcessor(sub, fmt.Sprintf("%s.processors[%d]", field, i), t)
			if err != nil {
				return nil, err
			}
			if p != nil {
				q.list = append(q.list, p)
			}
		}
		return q, nil
	default:
		return nil, fmt.Errorf("%s: unsupported post-processor type %q (supported: TemplateProcessing, ByteLevel, Sequence)", field, c.Type)
	}
}
