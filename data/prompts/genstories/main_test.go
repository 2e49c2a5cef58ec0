package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/data"
)

// The committed files are exactly what the generator writes.
func TestCommittedFilesUpToDate(t *testing.T) {
	fs, err := files()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range fs {
		got, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("data/prompts/%s is stale: run go run ./data/prompts/genstories", name)
		}
	}
}

func TestPromptsAreValid(t *testing.T) {
	read := func(name string) []data.Prompt {
		ps, skipped, err := data.ReadPrompts(filepath.Join("..", name), data.ReadOptions{})
		if err != nil || skipped != 0 {
			t.Fatalf("%s: %v (skipped %d)", name, err, skipped)
		}
		return ps
	}
	all, train, eval := read("stories.jsonl"), read("stories-train.jsonl"), read("stories-eval.jsonl")
	if len(train) != numTrain || len(eval) != numEval || len(all) != numTrain+numEval {
		t.Fatalf("sizes %d/%d/%d", len(all), len(train), len(eval))
	}
	inTrain := make(map[string]bool, len(train))
	for _, p := range train {
		inTrain[p.Text] = true
	}
	if len(inTrain) != numTrain {
		t.Error("duplicate training prompts")
	}
	for i, p := range all {
		if n := len(strings.Fields(p.Text)); n < 5 || n > 15 {
			t.Errorf("prompt %d has %d words: %q", i, n, p.Text)
		}
		for _, c := range []byte(p.Text) {
			if c < 0x20 || c > 0x7e {
				t.Errorf("prompt %d is not printable ASCII: %q", i, p.Text)
				break
			}
		}
		split := train
		j := i
		if i >= numTrain {
			split, j = eval, i-numTrain
		}
		if split[j].Text != p.Text {
			t.Errorf("prompt %d differs between stories.jsonl and its split", i)
		}
	}
	large := read("stories-train-8k.jsonl")
	inLarge := make(map[string]bool, len(large))
	for i, p := range large {
		if i < numTrain && p.Text != train[i].Text {
			t.Fatalf("stories-train-8k.jsonl prompt %d is not stories-train.jsonl's", i)
		}
		inLarge[p.Text] = true
	}
	if len(large) != numTrain+numMore || len(inLarge) != len(large) {
		t.Fatalf("stories-train-8k.jsonl: %d prompts, %d distinct, want %d", len(large), len(inLarge), numTrain+numMore)
	}
	for _, p := range eval {
		if inTrain[p.Text] || inLarge[p.Text] {
			t.Errorf("eval prompt %q is also a training prompt", p.Text)
		}
	}
}
