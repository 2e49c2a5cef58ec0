package chat

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// renderWithin renders src for a one-message conversation and fails the test
// when that takes more than limit: a template that hangs must not hang the
// test binary (nor the run that renders it).
func renderWithin(t *testing.T, src string, limit time.Duration) (string, error) {
	t.Helper()
	tmpl, err := New(src, SpecialTokens{BOS: "<s>", EOS: "</s>"})
	if err != nil {
		t.Fatalf("compiling %q: %v", src, err)
	}
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := tmpl.Render([]Message{{Role: "user", Content: "hi"}}, Options{AddGenerationPrompt: true})
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-time.After(limit):
		t.Fatalf("rendering %q did not stop within %v", src, limit)
	}
	return "", nil
}

// TestTemplateLimits: a chat template is code from the checkpoint that we
// run; one that loops or grows without bound is stopped with an error that
// says which limit it reached (steps, output or value size, call depth), well
// before it hangs or runs out of memory. Each of these would otherwise run
// for hours, take terabytes, or overflow the stack (a fatal error no Go code
// can recover from).
func TestTemplateLimits(t *testing.T) {
	for _, c := range []struct {
		name, src string
		limit     error
	}{
		// Loops: 10^10 iterations of nothing, a macro that calls itself, a
		// range of 10^12 numbers.
		{"nested loops", `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`, ErrTemplateSteps},
		{"recursion", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, ErrTemplateDepth},
		{"caller recursion", `{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}`, ErrTemplateDepth},
		{"huge range", `{% for i in range(1000000000000) %}x{% endfor %}`, ErrTemplateSize},
		// Growth: a string doubled 64 times, a list doubled, a string
		// multiplied by 10^12, a list appended to 10^8 times, output
		// written a thousand times a megabyte, and a join, a replace, a
		// print, an indent and a JSON indentation that multiply sizes.
		{"doubling string", `{% set ns = namespace(s="x") %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}`, ErrTemplateSize},
		// (Copying a list costs a step per item: the doubling list runs out
		// of steps before it reaches MaxTemplateItems.)
		{"doubling list", `{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}`, ErrTemplateSteps},
		{"string times", `{{ "x" * 1000000000000 }}`, ErrTemplateSize},
		{"appending", `{% set l = [] %}{% for i in range(10000) %}{% for j in range(10000) %}{% set _ = l.append(j) %}{% endfor %}{% endfor %}`, ErrTemplateSteps},
		{"output", `{% set s = "x" * 1000000 %}{% for i in range(1000) %}{{ s }}{% endfor %}`, ErrTemplateSize},
		{"join", `{% set s = "x" * 1000000 %}{% set l = [] %}{% for i in range(300) %}{% set _ = l.append(s) %}{% endfor %}{{ l | join("") | length }}`, ErrTemplateSize},
		{"replace", `{% set s = "x" * 100000 %}{{ s.replace("x", s) | length }}`, ErrTemplateSize},
		{"printed list", `{% set s = "x" * 1000000 %}{% set l = [] %}{% for i in range(300) %}{% set _ = l.append(s) %}{% endfor %}{{ l | length }}{{ l }}`, ErrTemplateSize},
		{"indent", `{{ ("x\n" * 1000) | indent(1000000) | length }}`, ErrTemplateSize},
		{"tojson indent", `{{ {"a": [1, [2, 3]]} | tojson(indent=1000000000000) }}`, ErrTemplateSize},
		// A list that holds itself nests without end when printed,
		// compared or encoded.
		{"self-holding list", `{% set l = [] %}{% set _ = l.append(l) %}{{ l }}`, ErrTemplateDepth},
		{"self-holding compare", `{% set l = [] %}{% set _ = l.append(l) %}{{ l == l }}`, ErrTemplateDepth},
		{"self-holding json", `{% set l = [] %}{% set _ = l.append(l) %}{{ l | tojson }}`, ErrTemplateDepth},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			out, err := renderWithin(t, c.src, 30*time.Second)
			if !errors.Is(err, c.limit) {
				t.Fatalf("got %d bytes, error %v; want %v", len(out), err, c.limit)
			}
			msg := err.Error()
			for _, want := range []string{"chat: rendering", "template", "limit"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not say %q", msg, want)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("stopped after %v: the limits are too loose to be a guard", d)
			}
		})
	}
}

// TestTemplateLimitsLeaveRealTemplatesAlone: a long conversation (200 turns,
// 400 words each) through a template that loops over every message and
// every word of it renders as before, well within the limits.
func TestTemplateLimitsLeaveRealTemplatesAlone(t *testing.T) {
	src := `{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{% for w in m.content.split(" ") %}{{ w }}{% if not loop.last %} {% endif %}{% endfor %}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}`
	tmpl, err := New(src, SpecialTokens{BOS: "<s>", EOS: "</s>"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]Message, 200)
	var want strings.Builder
	want.WriteString("<s>")
	for i := range msgs {
		role := []string{"user", "assistant"}[i%2]
		msgs[i] = Message{Role: role, Content: strings.Repeat("word ", 400)}
		want.WriteString("<|" + role + "|>" + msgs[i].Content + "</s>")
	}
	want.WriteString("<|assistant|>")
	got, err := tmpl.Render(msgs, Options{AddGenerationPrompt: true})
	if err != nil || got != want.String() {
		t.Fatalf("render: %v (%d bytes, want %d)", err, len(got), want.Len())
	}
}
