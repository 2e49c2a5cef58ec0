// Package tokenizer loads Hugging Face tokenizer.json files and encodes and decodes
// text exactly as @huggingface/tokenizers does, for the BPE models of both families
// that drafter's targets use: byte-level BPE (GPT-2 byte map; Llama-3, Qwen2/3) and
// SentencePiece-style BPE (▁ for spaces, byte fallback; Llama-2, Mistral).
//
// The pipeline is the library's: added tokens are split out first (longest match,
// with their lstrip/rstrip/single_word flags), each remaining section is normalized,
// pre-tokenized and run through the BPE model (merges applied lowest rank first,
// leftmost on ties), and the post-processor adds the template's special tokens.
// Anything in a tokenizer.json this package does not implement is refused at load
// time with an error naming the field and the type.
//
// A Tokenizer is safe for concurrent use.
package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Tokenizer encodes text to token ids and decodes ids to text.
type Tokenizer struct {
	tokens     []string         // id -> token string (model vocabulary and added tokens)
	vocab      map[string]int32 // the model's vocabulary
	addedVocab map[string]int32 // added tokens
	special    []bool           // id -> added token flagged special
	added      []addedToken
	addedID    map[int32]int // id -> index in added

	rawAdded  *addedMatcher // added tokens matched on the input (normalized=false)
	normAdded *addedMatcher // added tokens matched on normalized text

	normalizer normalizer
	preTok     preTokenizer
	model      *bpeModel
	post       postProcessor
	decoder    []decodeStep
	streamSafe bool

	family  string
	bos     string
	eos     string
	cleanUp bool

	pool sync.Pool // *encState
}

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	content    string
	id         int32
	special    bool
	lstrip     bool
	rstrip     bool
	normalized bool
	singleWord bool
}

// compJSON holds the fields of every normalizer, pre-tokenizer, post-processor and
// decoder type this package understands; each builder reads the ones it needs.
type compJSON struct {
	Type string `json:"type"`

	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Decoders      []json.RawMessage `json:"decoders"`
	Processors    []json.RawMessage `json:"processors"`

	Pattern    *patternJSON `json:"pattern"`
	Content    string       `json:"content"`
	Prepend    string       `json:"prepend"`
	StripLeft  *bool        `json:"strip_left"`
	StripRight *bool        `json:"strip_right"`

	Behavior         string `json:"behavior"`
	Invert           bool   `json:"invert"`
	AddPrefixSpace   *bool  `json:"add_prefix_space"`
	TrimOffsets      *bool  `json:"trim_offsets"`
	UseRegex         *bool  `json:"use_regex"`
	Replacement      string `json:"replacement"`
	PrependScheme    string `json:"prepend_scheme"`
	Split            *bool  `json:"split"`
	IndividualDigits bool   `json:"individual_digits"`

	Start int `json:"start"`
	Stop  int `json:"stop"`

	Single        []templatePieceJSON         `json:"single"`
	SpecialTokens map[string]specialTokenJSON `json:"special_tokens"`
}

type fileJSON struct {
	AddedTokens []struct {
		ID         *int32 `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		Lstrip     bool   `json:"lstrip"`
		Rstrip     bool   `json:"rstrip"`
		Normalized *bool  `json:"normalized"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
}

type modelJSON struct {
	Type                    string   `json:"type"`
	Dropout                 *float64 `json:"dropout"`
	UnkToken                *string  `json:"unk_token"`
	ContinuingSubwordPrefix *string  `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string  `json:"end_of_word_suffix"`
	FuseUnk                 bool     `json:"fuse_unk"`
	ByteFallback            bool     `json:"byte_fallback"`
	IgnoreMerges            bool     `json:"ignore_merges"`
	Vocab                   []byte   `json:"-"`
	Merges                  []byte   `json:"-"`
}

// Load reads a tokenizer.json. Decode does not apply transformers'
// clean_up_tokenization_spaces (the tokenizers library has no such step); use
// LoadDir to take it, and the BOS/EOS tokens, from tokenizer_config.json.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// LoadDir reads dir/tokenizer.json and, when present, dir/tokenizer_config.json for
// the BOS and EOS token strings and clean_up_tokenization_spaces (true when the
// config omits it, as in transformers).
func LoadDir(dir string) (*Tokenizer, error) {
	t, err := Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(cfgPath)
	if os.IsNotExist(err) {
		t.cleanUp = true
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var cfg struct {
		BOS     json.RawMessage `json:"bos_token"`
		EOS     json.RawMessage `json:"eos_token"`
		CleanUp *bool           `json:"clean_up_tokenization_spaces"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", cfgPath, err)
	}
	if t.bos, err = tokenString(cfg.BOS); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: bos_token: %w", cfgPath, err)
	}
	if t.eos, err = tokenString(cfg.EOS); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: eos_token: %w", cfgPath, err)
	}
	t.cleanUp = cfg.CleanUp == nil || *cfg.CleanUp
	return t, nil
}

// tokenString reads a token given as a string, an AddedToken object or null.
func tokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("expected a string or an object with \"content\": %w", err)
	}
	return o.Content, nil
}

// unmarshalFields decodes the members of a JSON object into v, except those named
// in skip (whose raw values are returned instead).
func unmarshalFields(raw []byte, v any, skip ...string) (map[string][]byte, error) {
	fields, err := objectFields(raw)
	if err != nil {
		return nil, err
	}
	// Rebuild the object without the big members and decode it normally.
	small := make([]byte, 0, 256)
	small = append(small, '{')
	for k, val := range fields {
		if slices.Contains(skip, k) {
			continue
		}
		if len(small) > 1 {
			small = append(small, ',')
		}
		kb, _ := json.Marshal(k)
		small = append(small, kb...)
		small = append(small, ':')
		small = append(small, val...)
	}
	small = append(small, '}')
	if err := json.Unmarshal(small, v); err != nil {
		return nil, err
	}
	return fields, nil
}

func parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	top, err := unmarshalFields(data, &f, "model")
	if err != nil {
		return nil, err
	}
	if !isNull(f.Truncation) {
		return nil, fmt.Errorf("truncation: not supported (expected null)")
	}
	if !isNull(f.Padding) {
		return nil, fmt.Errorf("padding: not supported (expected null)")
	}
	modelRaw, ok := top["model"]
	if !ok {
		return nil, fmt.Errorf("model: missing")
	}
	var mj modelJSON
	mf, err := unmarshalFields(modelRaw, &mj, "vocab", "merges")
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	mj.Vocab, mj.Merges = mf["vocab"], mf["merges"]
	if mj.Type != "BPE" && !(mj.Type == "" && len(mj.Merges) > 0) {
		return nil, fmt.Errorf("model.type: unsupported model type %q (only BPE is supported)", mj.Type)
	}
	if len(mj.Vocab) == 0 {
		return nil, fmt.Errorf("model.vocab: missing")
	}
	if len(mj.Merges) == 0 {
		return nil, fmt.Errorf("model.merges: missing")
	}
	if mj.Dropout != nil && *mj.Dropout != 0 {
		return nil, fmt.Errorf("model.dropout: %v not supported (BPE dropout makes encoding random)", *mj.Dropout)
	}
	if mj.ContinuingSubwordPrefix != nil && *mj.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("model.continuing_subword_prefix: %q not supported", *mj.ContinuingSubwordPrefix)
	}
	if mj.EndOfWordSuffix != nil && *mj.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("model.end_of_word_suffix: %q not supported", *mj.EndOfWordSuffix)
	}
	vocab, err := parseVocab(mj.Vocab)
	if err != nil {
		return nil, fmt.Errorf("model.vocab: %w", err)
	}
	t := &Tokenizer{vocab: vocab, addedVocab: map[string]int32{}, addedID: map[int32]int{}}
	m := &bpeModel{vocab: vocab, unk: -1, fuseUnk: mj.FuseUnk, byteFallback: mj.ByteFallback, ignoreMerges: mj.IgnoreMerges}
	size := 0
	for _, id := range vocab {
		if int(id) >= size {
			size = int(id) + 1
		}
	}
	for i, a := range f.AddedTokens {
		if a.ID == nil {
			return nil, fmt.Errorf("added_tokens[%d] (%q): missing id", i, a.Content)
		}
		if a.Content == "" {
			return nil, fmt.Errorf("added_tokens[%d]: empty content", i)
		}
		if int(*a.ID) >= size {
			size = int(*a.ID) + 1
		}
	}
	if size > 1<<26 {
		return nil, fmt.Errorf("model.vocab: token id %d is implausibly large", size-1)
	}
	t.tokens = make([]string, size)
	t.special = make([]bool, size)
	for tok, id := range vocab {
		t.tokens[id] = tok
	}
	if mj.UnkToken != nil {
		id, ok := vocab[*mj.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model.unk_token: %q is not in the vocabulary", *mj.UnkToken)
		}
		m.unk = id
	}
	merges, err := resolveMerges(mj.Merges, vocab)
	if err != nil {
		return nil, err
	}
	m.merges = newPairTable(len(merges))
	for i, r := range merges {
		m.merges.put(r.a, r.b, uint32(i), r.id)
	}
	// Added tokens.
	var rawList, normList []int
	for i, a := range f.AddedTokens {
		at := addedToken{content: a.Content, id: *a.ID, special: a.Special, lstrip: a.Lstrip, rstrip: a.Rstrip, singleWord: a.SingleWord}
		// Hugging Face defaults normalized to the opposite of special.
		at.normalized = !a.Special
		if a.Normalized != nil {
			at.normalized = *a.Normalized
		}
		t.added = append(t.added, at)
		t.addedID[at.id] = i
		t.tokens[at.id] = at.content
		t.addedVocab[at.content] = at.id
		t.special[at.id] = at.special
		if at.normalized {
			normList = append(normList, i)
		} else {
			rawList = append(rawList, i)
		}
	}
	if t.normalizer, err = buildNormalizer(f.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	var info preTokInfo
	if t.preTok, err = buildPreTokenizer(f.PreTokenizer, "pre_tokenizer", &info, true); err != nil {
		return nil, err
	}
	m.byteLevel = info.byteLevel
	m.init()
	m.findWordMark()
	t.model = m
	if m.byteLevel {
		for b := range 256 {
			if m.byteTok[b] < 0 {
				return nil, fmt.Errorf("model.vocab: byte-level vocabulary lacks the character %q for byte 0x%02X", byteChars[b], b)
			}
		}
	}
	if t.post, err = buildPostProcessor(f.PostProcessor, "post_processor", t); err != nil {
		return nil, err
	}
	if t.decoder, err = buildDecoder(f.Decoder, "decoder", nil); err != nil {
		return nil, err
	}
	t.streamSafe = decoderStreamSafe(t.decoder, !isNull(f.Decoder))
	t.rawAdded = newAddedMatcher(t.added, rawList, nil)
	if len(normList) > 0 {
		t.normAdded = newAddedMatcher(t.added, normList, t.normalizer)
	}
	t.family = "sentencepiece"
	if m.byteLevel {
		t.family = "byte-level"
	}
	return t, nil
}

// VocabSize is one more than the largest token id (model vocabulary and added
// tokens).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a token string (model vocabulary or added token).
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if id, ok := t.addedVocab[s]; ok {
		return int(id), true
	}
	id, ok := t.vocab[s]
	return int(id), ok
}

// Token returns the string of token id ("" when id is out of range).
func (t *Tokenizer) Token(id int) string {
	if id < 0 || id >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// IsSpecial reports whether id is an added token flagged special.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// Family is "byte-level" (GPT-2 byte map) or "sentencepiece".
func (t *Tokenizer) Family() string { return t.family }

// BOSToken is tokenizer_config.json's bos_token ("" when absent or loaded with Load).
func (t *Tokenizer) BOSToken() string { return t.bos }

// EOSToken is tokenizer_config.json's eos_token ("" when absent or loaded with Load).
func (t *Tokenizer) EOSToken() string { return t.eos }

// CleanUpSpaces reports whether Decode applies transformers'
// clean_up_tokenization_spaces (" ." -> "." and the like).
func (t *Tokenizer) CleanUpSpaces() bool { return t.cleanUp }

// SpecialTokens returns the added tokens flagged special, by id.
func (t *Tokenizer) SpecialTokens() []int {
	var out []int
	for _, a := range t.added {
		if a.special {
			out = append(out, int(a.id))
		}
	}
	sort.Ints(out)
	return out
}

// addedMatcher finds added tokens in text: a byte trie walked at each position,
// keeping the longest match (leftmost-longest, as the Hugging Face libraries do).
type addedMatcher struct {
	first [256]bool
	nodes []trieNode
}

type trieNode struct {
	edges []trieEdge
	tok   int32 // index into Tokenizer.added, -1 if no token ends here
}

type trieEdge struct {
	b  byte
	to int32
}

func newAddedMatcher(added []addedToken, list []int, nz normalizer) *addedMatcher {
	am := &addedMatcher{nodes: []trieNode{{tok: -1}}}
	for _, i := range list {
		s := added[i].content
		if nz != nil {
			s = normalizerString(nz, s)
		}
		if s == "" {
			continue
		}
		am.first[s[0]] = true
		n := int32(0)
		for k := 0; k < len(s); k++ {
			next := am.child(n, s[k])
			if next < 0 {
				next = int32(len(am.nodes))
				am.nodes = append(am.nodes, trieNode{tok: -1})
				am.nodes[n].edges = append(am.nodes[n].edges, trieEdge{s[k], next})
			}
			n = next
		}
		if am.nodes[n].tok < 0 {
			am.nodes[n].tok = int32(i)
		}
	}
	return am
}

// child returns the node the edge b leads to from node n, -1 when there is
// none.
func (am *addedMatcher) child(n int32, b byte) int32 {
	for _, e := range am.nodes[n].edges {
		if e.b == b {
			return e.to
		}
	}
	return -1
}

// section is a part of the text: an added token (tok >= 0, index into added) or
// text for the model (tok == -1).
type section struct {
	a, b int32
	tok  int32
}

func isWordChar(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) || r == '_' }

// split cuts s into sections around the added tokens it contains.
func (am *addedMatcher) split(added []addedToken, s []byte, out []section, cands []int32) ([]section, []int32) {
	prevEnd := 0
	for i := 0; i < len(s); {
		if !am.first[s[i]] {
			i++
			continue
		}
		// Collect the tokens matching at i, shortest first.
		cands = cands[:0]
		n := int32(0)
		for k := i; k < len(s); k++ {
			next := am.child(n, s[k])
			if next < 0 {
				break
			}
			n = next
			if am.nodes[n].tok >= 0 {
				cands = append(cands, am.nodes[n].tok)
			}
		}
		matched := false
		for c := len(cands) - 1; c >= 0; c-- {
			at := &added[cands[c]]
			a, b := i, i+len(at.content)
			if at.singleWord {
				if a > 0 {
					if r, _ := utf8.DecodeLastRune(s[:a]); isWordChar(r) {
						continue
					}
				}
				if b < len(s) {
					if r, _ := utf8.DecodeRune(s[b:]); isWordChar(r) {
						continue
					}
				}
			}
			if at.lstrip {
				for a > prevEnd {
					r, size := utf8.DecodeLastRune(s[prevEnd:a])
					if !unicode.IsSpace(r) {
						break
					}
					a -= size
				}
			}
			if at.rstrip {
				for b < len(s) {
					r, size := utf8.DecodeRune(s[b:])
					if !unicode.IsSpace(r) {
						break
					}
					b += size
				}
			}
			if a > prevEnd {
				out = append(out, section{int32(prevEnd), int32(a), -1})
			}
			out = append(out, section{int32(a), int32(b), cands[c]})
			prevEnd, i = b, b
			matched = true
			break
		}
		if !matched {
			i++
		}
	}
	if prevEnd < len(s) {
		out = append(out, section{int32(prevEnd), int32(len(s)), -1})
	}
	return out, cands
}

type mergeRec struct{ a, b, id int32 }

// resolveMerges parses the merge list and looks up the ids of both parts and of
// their concatenation, on all cores (the lookups dominate loading).
func resolveMerges(raw []byte, vocab map[string]int32) ([]mergeRec, error) {
	type pair struct{ a, b string }
	var pairs []pair
	err := parseMerges(raw, func(i int, a, b string) error {
		pairs = append(pairs, pair{a, b})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("model.merges: %w", err)
	}
	recs := make([]mergeRec, len(pairs))
	workers := min(runtime.GOMAXPROCS(0), 8)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	chunk := (len(pairs) + workers - 1) / workers
	for w := range workers {
		lo, hi := w*chunk, min((w+1)*chunk, len(pairs))
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ab []byte
			for i := lo; i < hi; i++ {
				p := pairs[i]
				ia, ok := vocab[p.a]
				if !ok {
					errs[w] = fmt.Errorf("model.merges[%d]: token %q is not in the vocabulary", i, p.a)
					return
				}
				ib, ok := vocab[p.b]
				if !ok {
					errs[w] = fmt.Errorf("model.merges[%d]: token %q is not in the vocabulary", i, p.b)
					return
				}
				ab = append(append(ab[:0], p.a...), p.b...)
				id, ok := vocab[string(ab)]
				if !ok {
					errs[w] = fmt.Errorf("model.merges[%d]: merged token %q is not in the vocabulary", i, ab)
					return
				}
				recs[i] = mergeRec{ia, ib, id}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return recs, nil
}
