package inspect

import (
	"errors"

	"github.com/drafter-ai/drafter/pkg/chat"
	"github.com/drafter-ai/drafter/pkg/tokenizer"
)

// Tokenized is one text and its token ids, as `drafter tokenize --json` prints it.
type Tokenized struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
	// Tokens are the vocabulary strings of IDs.
	Tokens []string `json:"tokens,omitempty"`
	// AssistantSpans are, for a rendered conversation, the [start, end) token
	// positions that are assistant content (the loss mask), end-of-turn included.
	AssistantSpans [][2]int `json:"assistant_spans,omitempty"`
}

// ErrNoChatTemplate is returned by TokenizeChat for a model without a chat
// template.
var ErrNoChatTemplate = errors.New("the model has no chat template")

// Tokenizer loads the tokenizer and the chat template of dir, which may be a
// whole checkpoint or a folder with only tokenizer.json and tokenizer_config.json.
// The template is nil when the model has none.
func Tokenizer(dir string) (*tokenizer.Tokenizer, *chat.Template, error) {
	tok, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := chat.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	return tok, tmpl, nil
}

// Tokenize encodes text; with special the post-processor's tokens (BOS...) are
// added, as the model is fed a raw prompt.
func Tokenize(tok *tokenizer.Tokenizer, text string, special bool) Tokenized {
	ids := tok.Encode(text, special)
	return Tokenized{Text: text, IDs: ids, Tokens: tokenStrings(tok, ids)}
}

// TokenizeChat renders msgs with the template (no generation prompt: the
// conversation is shown as training sees it) and tokenizes the text exactly as
// the model is fed it: the template writes its own BOS, so no special tokens are
// added. It returns the assistant spans in token positions.
func TokenizeChat(tok *tokenizer.Tokenizer, tmpl *chat.Template, msgs []chat.Message) (Tokenized, error) {
	if tmpl == nil {
		return Tokenized{}, ErrNoChatTemplate
	}
	text, spans, err := tmpl.AssistantSpans(msgs)
	if err != nil {
		return Tokenized{}, err
	}
	ids, offsets := tok.EncodeOffsets(text, false)
	mask := chat.TokenMask(nil, offsets, spans)
	out := Tokenized{Text: text, IDs: ids, Tokens: tokenStrings(tok, ids)}
	for i := 0; i < len(mask); {
		if !mask[i] {
			i++
			continue
		}
		j := i
		for j < len(mask) && mask[j] {
			j++
		}
		out.AssistantSpans = append(out.AssistantSpans, [2]int{i, j})
		i = j
	}
	return out, nil
}

func tokenStrings(tok *tokenizer.Tokenizer, ids []int) []string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = tok.Token(id)
	}
	return s
}
