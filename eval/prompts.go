package eval

import (
	"fmt"

	"github.com/drafter-ai/drafter/data"
	"github.com/drafter-ai/drafter/pkg/target"
)

// LoadPrompts reads a prompt file (the formats data.ReadPrompts accepts:
// JSONL raw text, OpenAI messages or ShareGPT, or .txt) and tokenises each
// prompt for target t as generation does (data.Encode).
// limit > 0 keeps only the first limit prompts.
func LoadPrompts(t *target.Target, path string, limit int) ([]Prompt, error) {
	ps, _, err := data.ReadPrompts(path, data.ReadOptions{})
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	if limit > 0 && len(ps) > limit {
		ps = ps[:limit]
	}
	out := make([]Prompt, len(ps))
	for i, p := range ps {
		ids, err := data.Encode(p, t.Tok, t.Template)
		if err != nil {
			return nil, fmt.Errorf("eval: %s line %d: %w", path, p.Line, err)
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("eval: %s line %d: the prompt encodes to no tokens", path, p.Line)
		}
		id := p.ID
		if id == "" {
			id = fmt.Sprintf("line %d", p.Line)
		}
		out[i] = Prompt{ID: id, Tokens: ids}
	}
	return out, nil
}
