package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/drafter-ai/drafter/data"
	"github.com/drafter-ai/drafter/pkg/inspect"
)

func newTokenizeCmd() *cobra.Command {
	var model, chatFile string
	var special, asJSON bool
	c := &cobra.Command{
		Use:   "tokenize --model DIR [--special] [--json] TEXT... | --chat FILE.json",
		Short: "Print the exact token ids the model is fed",
		Long: `tokenize prints each TEXT's token ids (with --special, after the tokenizer's post-processor,
e.g. with BOS). With --chat FILE.json it renders a conversation (a JSON list of
{"role", "content"} messages) with the model's chat template and prints the text, its ids and
the assistant spans (the token positions a drafter is trained on).

--model may name a whole checkpoint or a folder holding only tokenizer.json and
tokenizer_config.json.`,
		Example: `  drafter tokenize --model models/stories260k "Once upon a time"
  drafter tokenize --model /models/llama3 --chat conversation.json --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if (chatFile == "") == (len(args) == 0) {
				return &usageError{fmt.Errorf("give either TEXT arguments or --chat FILE.json")}
			}
			tok, tmpl, err := inspect.Tokenizer(model)
			if err != nil {
				return err
			}
			var outs []inspect.Tokenized
			if chatFile != "" {
				msgs, err := data.ReadMessagesFile(chatFile)
				if err != nil {
					return err
				}
				out, err := inspect.TokenizeChat(tok, tmpl, msgs)
				if err != nil {
					return err
				}
				outs = append(outs, out)
			}
			for _, text := range args {
				outs = append(outs, inspect.Tokenize(tok, text, special))
			}
			enc := json.NewEncoder(os.Stdout)
			for _, o := range outs {
				if asJSON {
					if err := enc.Encode(o); err != nil {
						return err
					}
					continue
				}
				if chatFile != "" {
					fmt.Printf("text:\n%s\n", o.Text)
				}
				fmt.Println(strings.Trim(fmt.Sprint(o.IDs), "[]"))
				for _, s := range o.AssistantSpans {
					fmt.Printf("assistant tokens [%d, %d): %q\n", s[0], s[1], strings.Join(o.Tokens[s[0]:s[1]], ""))
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&model, "model", "", "checkpoint or tokenizer folder")
	c.Flags().StringVar(&chatFile, "chat", "", "render this conversation (JSON list of messages) with the chat template")
	c.Flags().BoolVar(&special, "special", false, "apply the post-processor (add BOS and other special tokens)")
	c.Flags().BoolVar(&asJSON, "json", false, `print one JSON object per input: {"text": ..., "ids": [...]}`)
	c.MarkFlagRequired("model")
	return c
}
