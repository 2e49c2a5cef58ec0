package chat

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// AssistantSpans renders the conversation (no generation prompt, default
// options) and returns the byte ranges [start, end) of the rendered text that
// the model itself produced in each assistant turn: the content plus the
// end-of-turn marker the template emits right after it (e.g. "<|eot_id|>",
// "<|im_end|>", "</s>"), without the role header. Spans are in conversation
// order and do not overlap. See AssistantSpansWith for the method and its
// limits.
func (t *Template) AssistantSpans(msgs []Message) (text string, spans [][2]int, err error) {
	return t.AssistantSpansWith(msgs, Options{})
}

// AssistantSpansWith is AssistantSpans with rendering options (tools, template
// name, variables, time); opt.AddGenerationPrompt is ignored (always false).
//
// Method. Let T be the full rendering. For every assistant turn i:
//
//   - Start: T is compared with the rendering of the turns before i with
//     add_generation_prompt=true. When that rendering P is a prefix of T, the
//     span starts at len(P): everything the template puts after the
//     generation prompt counts as model output, e.g. Qwen3's empty
//     "<think>\n\n</think>\n\n" block in the final turn, or a leading space
//     in Llama-2's "[/INST] answer". Otherwise the span starts where the
//     content starts (below).
//   - Content: the conversation is rendered a second time with a unique
//     sentinel string in place of each non-empty assistant content. The text
//     between sentinels is the template's own scaffolding; walking T with it
//     locates where each content (as the template transformed it, e.g.
//     trimmed) starts and ends.
//   - End: from the content end, the span extends over the first occurrence
//     of the template's end-of-turn marker (EndOfTurn) when no other special
//     token comes before it (so tool-call text the template writes after the
//     content, up to the marker, is included); without such a marker it ends
//     with the content.
//
// Limits: an error is returned, never a guess, when neither method locates a
// turn (e.g. a template that drops an assistant's content and renders the
// prefix differently). When the sentinel rendering cannot be aligned with T
// (templates that branch on the content itself, such as Qwen3 splitting
// "<think>" blocks), only the prefix method is used, and the span then runs
// to the first end-of-turn marker; a content that itself contains special
// token strings can end it early. Assistant turns with empty content are
// located only by the prefix method. The role header is excluded only as far
// as the generation prompt reproduces it.
func (t *Template) AssistantSpansWith(msgs []Message, opt Options) (text string, spans [][2]int, err error) {
	opt.AddGenerationPrompt = false
	if opt.Now.IsZero() {
		opt.Now = time.Now() // one instant for every rendering below
	}
	full, err := t.Render(msgs, opt)
	if err != nil {
		return "", nil, err
	}
	var asst []int
	for i := range msgs {
		if msgs[i].Role == "assistant" {
			asst = append(asst, i)
		}
	}
	if len(asst) == 0 {
		return full, nil, nil
	}
	cs, ce := t.locateContents(msgs, asst, full, opt)

	spans = make([][2]int, 0, len(asst))
	prevEnd := 0
	for k, mi := range asst {
		start := -1
		genOpt := opt
		genOpt.AddGenerationPrompt = true
		if p, err := t.Render(msgs[:mi], genOpt); err == nil && strings.HasPrefix(full, p) &&
			len(p) >= prevEnd && (cs[k] < 0 || len(p) <= cs[k]) {
			start = len(p)
		}
		if start < 0 {
			start = cs[k]
		}
		if start < 0 || start < prevEnd {
			return "", nil, fmt.Errorf("chat: %s: cannot locate assistant message %d in the rendered conversation (the template renders it in a way neither the generation prompt nor the content reveals)", t.source, mi)
		}
		from := start
		if ce[k] >= 0 {
			from = ce[k]
		}
		end := -1
		if t.eot != "" {
			if j := t.firstEndOfTurn(full[from:]); j >= 0 {
				end = from + j + len(t.eot)
			}
		}
		if end < 0 {
			if ce[k] < 0 {
				return "", nil, fmt.Errorf("chat: %s: cannot find where assistant message %d ends in the rendered conversation (no end-of-turn marker %q follows it)", t.source, mi, t.eot)
			}
			end = ce[k]
		}
		spans = append(spans, [2]int{start, end})
		prevEnd = end
	}
	return full, spans, nil
}

// firstEndOfTurn returns the index of the first end-of-turn marker in s when
// no other special token starts before it, else -1.
func (t *Template) firstEndOfTurn(s string) int {
	j := strings.Index(s, t.eot)
	if j < 0 {
		return -1
	}
	head := s[:j]
	for _, sp := range t.special {
		if sp != t.eot && strings.Contains(head, sp) {
			return -1
		}
	}
	return j
}

// locateContents finds, for each assistant message asst[k], the byte range
// [cs[k], ce[k]) of its rendered content in full, or -1 where unknown.
func (t *Template) locateContents(msgs []Message, asst []int, full string, opt Options) (cs, ce []int) {
	cs = make([]int, len(asst))
	ce = make([]int, len(asst))
	for k := range cs {
		cs[k], ce[k] = -1, -1
	}
	base := t.sentinelBase(msgs, full)
	sub := make([]Message, len(msgs))
	copy(sub, msgs)
	var which []int // indices k into asst that carry a sentinel, in order
	var sents []string
	for k, mi := range asst {
		if msgs[mi].Content == "" {
			continue
		}
		s := base + strconv.Itoa(k) + "Z"
		sub[mi].Content = s
		which = append(which, k)
		sents = append(sents, s)
	}
	if len(which) == 0 {
		return cs, ce
	}
	u, err := t.Render(sub, opt)
	if err != nil {
		return cs, ce
	}
	// Split u into scaffolding segments around the sentinels, in order.
	segs := make([]string, 0, len(sents)+1)
	rest := u
	for _, s := range sents {
		if strings.Count(u, s) != 1 {
			return cs, ce
		}
		j := strings.Index(rest, s)
		if j < 0 {
			return cs, ce // out of order
		}
		segs = append(segs, rest[:j])
		rest = rest[j+len(s):]
	}
	segs = append(segs, rest)

	// Walk full with the segments.
	pos := 0
	gotS := make([]int, len(sents))
	gotE := make([]int, len(sents))
	for n := range sents {
		if !strings.HasPrefix(full[pos:], segs[n]) {
			return cs, ce
		}
		pos += len(segs[n])
		content := msgs[asst[which[n]]].Content
		next := segs[n+1]
		var end int
		switch {
		case strings.HasPrefix(full[pos:], content+next) && (n+1 < len(sents) || pos+len(content)+len(next) == len(full)):
			end = pos + len(content)
		case n+1 == len(sents):
			if !strings.HasSuffix(full, next) || len(full)-len(next) < pos {
				return cs, ce
			}
			end = len(full) - len(next)
		default:
			if next == "" {
				return cs, ce // two contents back to back: ambiguous
			}
			j := strings.Index(full[pos:], next)
			if j < 0 {
				return cs, ce
			}
			end = pos + j
		}
		gotS[n], gotE[n] = pos, end
		pos = end
	}
	if pos+len(segs[len(sents)]) != len(full) {
		return cs, ce
	}
	for n, k := range which {
		cs[k], ce[k] = gotS[n], gotE[n]
	}
	return cs, ce
}

// sentinelBase returns a marker that occurs neither in the rendering nor in
// any message, made only of letters and digits so that templates that trim,
// split or escape content leave it intact.
func (t *Template) sentinelBase(msgs []Message, full string) string {
	for n := 0; ; n++ {
		base := "QxDrafterSpan" + strconv.Itoa(n) + "Q"
		ok := !strings.Contains(full, base)
		for i := 0; ok && i < len(msgs); i++ {
			ok = !strings.Contains(msgs[i].Content, base)
		}
		if ok {
			return base
		}
	}
}

// probeEndOfTurn renders a two-turn probe and returns the special token that
// follows the assistant content (after optional whitespace), or "".
func (t *Template) probeEndOfTurn() string {
	const sent = "QxDrafterProbeQ"
	msgs := []Message{{Role: "user", Content: "Hi"}, {Role: "assistant", Content: sent}}
	out, err := t.Render(msgs, Options{Now: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		return ""
	}
	j := strings.Index(out, sent)
	if j < 0 {
		return ""
	}
	after := strings.TrimLeft(out[j+len(sent):], " \t\r\n")
	for _, sp := range t.special { // longest first
		if strings.HasPrefix(after, sp) {
			return sp
		}
	}
	return ""
}
