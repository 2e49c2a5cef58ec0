package tokenizer

import (
	"bytes"
	"fmt"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// pairTable maps a pair of token ids (packed a<<32|b) to its merge (rank<<32|new
// id), with open addressing so that the merge loop does no Go map lookups.
type pairTable struct {
	keys  []uint64
	vals  []uint64
	shift uint
}

const emptyKey = ^uint64(0)

func newPairTable(n int) *pairTable {
	size := 1
	for size < 2*n+2 {
		size <<= 1
	}
	t := &pairTable{keys: make([]uint64, size), vals: make([]uint64, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
	for i := range t.keys {
		t.keys[i] = emptyKey
	}
	return t
}

func (t *pairTable) slot(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> t.shift }

// put stores a merge; a later merge of the same pair replaces the earlier one, as
// both Hugging Face implementations do when building their maps.
func (t *pairTable) put(a, b int32, rank uint32, id int32) {
	key := uint64(uint32(a))<<32 | uint64(uint32(b))
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(key); ; i = (i + 1) & mask {
		if t.keys[i] == emptyKey || t.keys[i] == key {
			t.keys[i] = key
			t.vals[i] = uint64(rank)<<32 | uint64(uint32(id))
			return
		}
	}
}

const noRank = ^uint32(0)

// get returns the rank and the merged id of pair (a, b), or noRank.
func (t *pairTable) get(a, b int32) (uint32, int32) {
	if a < 0 || b < 0 {
		return noRank, -1
	}
	key := uint64(uint32(a))<<32 | uint64(uint32(b))
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(key); ; i = (i + 1) & mask {
		k := t.keys[i]
		if k == key {
			v := t.vals[i]
			return uint32(v >> 32), int32(uint32(v))
		}
		if k == emptyKey {
			return noRank, -1
		}
	}
}

// bpeModel is a BPE model over a vocabulary and a ranked merge list.
type bpeModel struct {
	vocab        map[string]int32 // the model's vocabulary (not the added tokens)
	merges       *pairTable
	byteLevel    bool       // pieces are raw bytes mapped through the GPT-2 table
	byteTok      [256]int32 // byte-level: id of each byte's character, -1 if absent
	asciiTok     [128]int32 // id of each one-character ASCII token, -1 if absent
	byteFallback bool
	byteFB       [256]int32 // <0xNN> ids, -1 if absent
	unk          int32      // -1 without an unknown token
	fuseUnk      bool
	ignoreMerges bool
	// wordMark, when set, is a marker (SentencePiece's "▁") that no token holds
	// after another character except the marker itself. No merge can then join
	// the text before a marker with the marker, so pieces split there encode
	// independently (and hit the word cache) with exactly the same result.
	wordMark string
}

// findWordMark enables wordMark for SentencePiece-style vocabularies.
func (m *bpeModel) findWordMark() {
	const mark = "▁"
	if m.byteLevel {
		return
	}
	if _, ok := m.vocab[mark]; !ok {
		return
	}
	for tok := range m.vocab {
		for i := 1; i < len(tok); i++ {
			j := strings.Index(tok[i:], mark)
			if j < 0 {
				break
			}
			k := i + j
			if !strings.HasSuffix(tok[:k], mark) {
				return
			}
			i = k
		}
	}
	m.wordMark = mark
}

// encodePiece encodes one pre-token, cutting it before each word mark that follows
// another character when that is exact (see wordMark).
func (m *bpeModel) encodePiece(st *encState, piece []byte, base int32) {
	if m.wordMark == "" || len(piece) <= len(m.wordMark) {
		m.encodeWord(st, piece, base)
		return
	}
	mark := m.wordMark
	start := 0
	for i := 1; i < len(piece); {
		j := bytes.Index(piece[i:], unsafeBytes(mark))
		if j < 0 {
			break
		}
		k := i + j
		if !bytes.HasSuffix(piece[start:k], unsafeBytes(mark)) {
			m.encodeWord(st, piece[start:k], base+int32(start))
			start = k
		}
		i = k + len(mark)
	}
	m.encodeWord(st, piece[start:], base+int32(start))
}

func (m *bpeModel) init() {
	for i := range m.byteTok {
		m.byteTok[i] = -1
		m.byteFB[i] = -1
	}
	for i := range m.asciiTok {
		m.asciiTok[i] = -1
	}
	for b := range 256 {
		if id, ok := m.vocab[byteChars[b]]; ok {
			m.byteTok[b] = id
		}
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteFB[b] = id
		}
		if b < 128 {
			if id, ok := m.vocab[string(rune(b))]; ok {
				m.asciiTok[b] = id
			}
		}
	}
}

// wordCacheMax bounds the per-state cache of encoded words.
const (
	wordCacheMax     = 1 << 14
	wordCacheMaxSize = 256
	linearMergeMax   = 64 // longer words use the heap
)

// cachedWord is the encoding of one pre-token: ids and the end of each token (bytes
// from the pre-token start).
type cachedWord struct {
	ids  []int32
	ends []int32
}

// encodeWord appends the tokens of word (a pre-token at byte base of the
// normalized text) to st.ids / st.spans.
func (m *bpeModel) encodeWord(st *encState, word []byte, base int32) {
	if len(word) == 0 {
		return
	}
	if cw, ok := st.cache[string(word)]; ok {
		st.emitCached(cw, base)
		return
	}
	if m.ignoreMerges {
		var id int32
		var ok bool
		if m.byteLevel {
			k := st.keyBuf[:0]
			for _, b := range word {
				k = append(k, byteChars[b]...)
			}
			st.keyBuf = k
			id, ok = m.vocab[string(k)]
		} else {
			id, ok = m.vocab[string(word)]
		}
		if ok {
			st.ids = append(st.ids, id)
			st.spans = append(st.spans, span{base, base + int32(len(word))})
			m.remember(st, word, base, len(st.ids)-1)
			return
		}
	}
	// Initial symbols.
	ids := st.symID[:0]
	ends := st.symEnd[:0]
	if m.byteLevel {
		for i, b := range word {
			ids = append(ids, m.byteTok[b])
			ends = append(ends, int32(i+1))
		}
	} else {
		for i := 0; i < len(word); {
			c := word[i]
			var id int32
			size := 1
			if c < utf8.RuneSelf {
				id = m.asciiTok[c]
			} else {
				_, size = utf8.DecodeRune(word[i:])
				v, ok := m.vocab[string(word[i:i+size])]
				id = v
				if !ok {
					id = -1
				}
			}
			if id < 0 && m.fuseUnk && !m.byteFallback && len(ids) > 0 && ids[len(ids)-1] < 0 {
				ends[len(ends)-1] = int32(i + size)
			} else {
				ids = append(ids, id)
				ends = append(ends, int32(i+size))
			}
			i += size
		}
	}
	if len(ids) > linearMergeMax {
		ids, ends = m.mergeHeap(st, ids, ends)
	} else {
		ids, ends = m.mergeLinear(st, ids, ends)
	}
	st.symID, st.symEnd = ids, ends
	// Emit, falling back to bytes or the unknown token for unknown symbols.
	n0 := len(st.ids)
	start := int32(0)
	for k, id := range ids {
		end := ends[k]
		if id >= 0 {
			st.ids = append(st.ids, id)
			st.spans = append(st.spans, span{base + start, base + end})
		} else {
			m.emitUnknown(st, word[start:end], base+start)
		}
		start = end
	}
	m.remember(st, word, base, n0)
}

// remember caches the tokens st.ids[n0:] of word.
func (m *bpeModel) remember(st *encState, word []byte, base int32, n0 int) {
	if len(word) > wordCacheMaxSize {
		return
	}
	if len(st.cache) >= wordCacheMax {
		clear(st.cache)
	}
	n := len(st.ids) - n0
	buf := make([]int32, 2*n)
	cw := cachedWord{ids: buf[:n:n], ends: buf[n:]}
	copy(cw.ids, st.ids[n0:])
	for k := range cw.ends {
		cw.ends[k] = st.spans[n0+k].b - base
	}
	st.cache[string(word)] = cw
}

func (m *bpeModel) emitUnknown(st *encState, b []byte, at int32) {
	if m.byteFallback {
		ok := true
		for _, c := range b {
			if m.byteFB[c] < 0 {
				ok = false
				break
			}
		}
		if ok {
			for i, c := range b {
				st.ids = append(st.ids, m.byteFB[c])
				st.spans = append(st.spans, span{at + int32(i), at + int32(i) + 1})
			}
			return
		}
	}
	if m.unk < 0 {
		// No unknown token: the character is dropped, as Hugging Face does.
		// (Consecutive unknown characters were already fused when fuse_unk.)
		return
	}
	st.ids = append(st.ids, m.unk)
	st.spans = append(st.spans, span{at, at + int32(len(b))})
}

// mergeLinear applies merges, lowest rank first and leftmost among equal ranks, by
// scanning the pair ranks; it is the fastest method for the short words that make up
// almost all text.
func (m *bpeModel) mergeLinear(st *encState, ids, ends []int32) ([]int32, []int32) {
	n := len(ids)
	if n < 2 {
		return ids, ends
	}
	rk := st.rk[:0]
	nid := st.nid[:0]
	for k := 0; k+1 < n; k++ {
		r, id := m.merges.get(ids[k], ids[k+1])
		rk = append(rk, r)
		nid = append(nid, id)
	}
	for {
		best, bi := noRank, -1
		for k := 0; k+1 < n; k++ {
			if rk[k] < best {
				best, bi = rk[k], k
			}
		}
		if bi < 0 {
			break
		}
		ids[bi] = nid[bi]
		ends[bi] = ends[bi+1]
		copy(ids[bi+1:n-1], ids[bi+2:n])
		copy(ends[bi+1:n-1], ends[bi+2:n])
		if bi+1 < n-1 {
			copy(rk[bi+1:n-2], rk[bi+2:n-1])
			copy(nid[bi+1:n-2], nid[bi+2:n-1])
		}
		n--
		if bi > 0 {
			rk[bi-1], nid[bi-1] = m.merges.get(ids[bi-1], ids[bi])
		}
		if bi+1 < n {
			rk[bi], nid[bi] = m.merges.get(ids[bi], ids[bi+1])
		}
	}
	st.rk, st.nid = rk, nid
	return ids[:n], ends[:n]
}

// mergeHeap is mergeLinear for long words: a binary heap of (rank, position) keys
// over a linked list of symbols. Equal ranks pop leftmost first because positions
// only grow to the right.
func (m *bpeModel) mergeHeap(st *encState, ids, ends []int32) ([]int32, []int32) {
	n := len(ids)
	next := st.next[:0]
	prev := st.prev[:0]
	for k := range n {
		next = append(next, int32(k+1))
		prev = append(prev, int32(k-1))
	}
	h := st.heap[:0]
	push := func(r uint32, pos int32) {
		h = append(h, uint64(r)<<32|uint64(uint32(pos)))
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if h[p] <= h[i] {
				break
			}
			h[p], h[i] = h[i], h[p]
			i = p
		}
	}
	pop := func() uint64 {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for i := 0; ; {
			l := 2*i + 1
			if l >= len(h) {
				break
			}
			c := l
			if r := l + 1; r < len(h) && h[r] < h[l] {
				c = r
			}
			if h[i] <= h[c] {
				break
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
		return top
	}
	for k := 0; k+1 < n; k++ {
		if r, _ := m.merges.get(ids[k], ids[k+1]); r != noRank {
			push(r, int32(k))
		}
	}
	alive := st.alive[:0]
	for range n {
		alive = append(alive, true)
	}
	for len(h) > 0 {
		e := pop()
		r, pos := uint32(e>>32), int32(uint32(e))
		if !alive[pos] || next[pos] >= int32(n) {
			continue
		}
		nx := next[pos]
		r2, id := m.merges.get(ids[pos], ids[nx])
		if r2 != r {
			continue // stale entry
		}
		ids[pos] = id
		ends[pos] = ends[nx]
		alive[nx] = false
		next[pos] = next[nx]
		if next[nx] < int32(n) {
			prev[next[nx]] = pos
		}
		if p := prev[pos]; p >= 0 {
			if r, _ := m.merges.get(ids[p], ids[pos]); r != noRank {
				push(r, p)
			}
		}
		if nn := next[pos]; nn < int32(n) {
			if r, _ := m.merges.get(ids[pos], ids[nn]); r != noRank {
				push(r, pos)
			}
		}
	}
	st.heap, st.next, st.prev, st.alive = h, next, prev, alive
	w := 0
	for k := 0; k < n; k++ {
		if alive[k] {
			ids[w], ends[w] = ids[k], ends[k]
			w++
		}
	}
	return ids[:w], ends[:w]
}

// byteChars is the GPT-2 byte-to-unicode table: printable Latin-1 bytes map to
// themselves and the other 68 bytes to U+0100 onwards, in byte order.
var byteChars = func() (t [256]string) {
	n := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = string(rune(b))
		} else {
			t[b] = string(rune(256 + n))
			n++
		}
	}
	return t
}()

// charByte inverts byteChars: for a rune r < 0x144, charByte[r]-1 is its byte (0:
// not a byte-level character).
var charByte = func() (t [0x144]uint16) {
	for b := range 256 {
		r, _ := utf8.DecodeRuneInString(byteChars[b])
		t[r] = uint16(b) + 1
	}
	return t
}()
