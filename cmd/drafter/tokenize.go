package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/data"
	"github.com/drafter-ai/drafter/pkg/inspect"
)

type tokenizeOptions struct {
	Model, Chat   string
	Texts         []string
	Special, JSON bool
	// Out receives the result, Warn the warnings (bytes of --chat's file
	// that are not UTF-8).
	Out, Warn io.Writer
}

func newCmdTokenize(runF func(*tokenizeOptions) error) *cobra.Command {
	o := &tokenizeOptions{}
	c := &cobra.Command{
		Use:   "tokenize --model DIR [--special] [--json] TEXT... | --chat FILE.json",
		Short: "Print the exact token ids the model is fed",
		Long: `tokenize prints each TEXT's token ids (with --special, after the tokenizer's post-processor,
e.g. with BOS). With --chat FILE.json it reads the conversation stored in that file (a JSON
list of {"role", "content"} messages; the file's name goes on the command line, not the JSON),
renders it with the model's chat template and prints the text, its ids and the assistant spans
(the token positions a drafter is trained on).

--model may name a whole checkpoint or a folder holding only tokenizer.json and
tokenizer_config.json.`,
		Example: `  drafter tokenize --model models/stories260k "Once upon a time"
  drafter tokenize --model /models/llama3 --chat conversation.json --json`,
		RunE: func(c *cobra.Command, args []string) error {
			o.Texts, o.Out, o.Warn = args, c.OutOrStdout(), c.ErrOrStderr()
			if (o.Chat == "") == (len(args) == 0) {
				return usagef("give either TEXT arguments or --chat FILE.json")
			}
			if looksInline(o.Chat) {
				return usagef("--chat takes the name of a file holding the conversation, not the JSON itself: write %.40q... into a file, e.g. conversation.json, and pass --chat conversation.json", o.Chat)
			}
			if o.Chat != "" && o.Special {
				return usagef("--special applies to TEXT arguments; a --chat conversation is tokenized as the model is fed it (its template writes the special tokens)")
			}
			if runF != nil {
				return runF(o)
			}
			return runTokenize(o)
		},
	}
	fs := c.Flags()
	fs.StringVar(&o.Model, "model", "", "checkpoint or tokenizer folder")
	// The backquoted FILE is the value's name in the help (pflag's rule).
	fs.StringVar(&o.Chat, "chat", "", "render with the chat template the conversation in `FILE`: a file holding a JSON list of {\"role\", \"content\"} messages (its name, not the JSON itself)")
	fs.BoolVar(&o.Special, "special", false, "apply the post-processor (add BOS and other special tokens) to TEXT")
	fs.BoolVar(&o.JSON, "json", false, `print one JSON object per input: {"text": ..., "ids": [...]}`)
	requireFlags(c, "model")
	return c
}

// looksInline reports whether a --chat value is a conversation written on
// the command line rather than a file's name: it starts like JSON and names
// no file. A file whose name starts with "[" or "{" still works.
func looksInline(chat string) bool {
	t := strings.TrimSpace(chat)
	if !strings.HasPrefix(t, "[") && !strings.HasPrefix(t, "{") {
		return false
	}
	_, err := os.Stat(chat)
	return err != nil
}

func runTokenize(o *tokenizeOptions) error {
	tok, tmpl, err := inspect.Tokenizer(o.Model)
	if err != nil {
		return err
	}
	var outs []inspect.Tokenized
	if o.Chat != "" {
		msgs, err := data.ReadMessagesFile(o.Chat, data.ReadOptions{Warn: o.Warn})
		if err != nil {
			return err
		}
		out, err := inspect.TokenizeChat(tok, tmpl, msgs)
		if errors.Is(err, inspect.ErrNoChatTemplate) {
			return usagef("--chat: %s has no chat template (tokenizer_config.json sets no chat_template); pass the text as TEXT arguments instead", o.Model)
		}
		if err != nil {
			return fmt.Errorf("--chat %s: %w", o.Chat, err)
		}
		outs = append(outs, out)
	}
	for _, text := range o.Texts {
		outs = append(outs, inspect.Tokenize(tok, text, o.Special))
	}
	enc := json.NewEncoder(o.Out)
	for _, t := range outs {
		if o.JSON {
			if err := enc.Encode(t); err != nil {
				return err
			}
			continue
		}
		if o.Chat != "" {
			fmt.Fprintf(o.Out, "text:\n%s\n", t.Text)
		}
		fmt.Fprintln(o.Out, strings.Trim(fmt.Sprint(t.IDs), "[]"))
		for _, s := range t.AssistantSpans {
			fmt.Fprintf(o.Out, "assistant tokens [%d, %d): %q\n", s[0], s[1], strings.Join(t.Tokens[s[0]:s[1]], ""))
		}
	}
	return nil
}
