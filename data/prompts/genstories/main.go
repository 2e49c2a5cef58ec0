// Command genstories writes the bundled demo prompts: short story openings in
// the style of TinyStories, which the bundled stories260k model was trained
// on. The output is a pure function of the word lists and the seed below;
// run it from the repository root after editing them:
//
//	go run ./data/prompts/genstories
//
// It writes data/prompts/stories.jsonl (the first 440 prompts),
// stories-train.jsonl (the first 400), stories-eval.jsonl (the 40 held-out
// ones) and stories-train-8k.jsonl (the 400 training prompts and the next
// 8000, none of them an eval prompt: the data behind docs/acceptance.md),
// one {"prompt": "..."} per line.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
)

// Sizes of the two splits.
const (
	numTrain = 400
	numEval  = 40
	numMore  = 8000 // further training prompts of stories-train-8k.jsonl
	seed     = 0x5eed_57_0e1e5
)

var (
	girls   = []string{"Lily", "Sue", "Mia", "Amy", "Anna", "Lucy", "Emma", "Sara", "Zoe", "Kate", "Jenny", "Molly", "Ella", "Rose"}
	boys    = []string{"Tim", "Ben", "Tom", "Sam", "Jack", "Leo", "Bob", "Timmy", "Joe", "Jake", "Finn", "Max", "Billy", "Dan"}
	pets    = []string{"Max", "Spot", "Fluffy", "Buddy", "Coco", "Rex", "Daisy", "Pip", "Whiskers", "Sunny", "Bella", "Lucky"}
	animals = []string{"dog", "cat", "bird", "bunny", "frog", "bear", "duck", "fox", "mouse", "lion", "fish", "puppy", "kitten", "owl", "turtle", "squirrel", "elephant"}
	// animalAdjs describe creatures, objectAdjs things, townAdjs settings.
	animalAdjs = []string{"big", "little", "happy", "brave", "kind", "small", "funny", "fluffy", "silly", "tiny", "friendly", "sleepy", "old", "curious"}
	objectAdjs = []string{"big", "little", "shiny", "red", "blue", "small", "soft", "old", "pretty", "tiny", "yellow", "new", "green", "special"}
	townAdjs   = []string{"big", "small", "quiet", "sunny", "green", "little", "old", "busy", "happy"}
	towns      = []string{"town", "village", "forest", "garden", "house", "city", "valley"}
	// places pairs a destination with the phrase for being there.
	places = []struct{ name, at string }{
		{"park", "in the park"}, {"garden", "in the garden"}, {"forest", "in the forest"}, {"beach", "at the beach"},
		{"farm", "on the farm"}, {"pond", "by the pond"}, {"woods", "in the woods"}, {"yard", "in the yard"},
		{"river", "by the river"}, {"hill", "on the hill"}, {"zoo", "at the zoo"}, {"store", "at the store"},
		{"playground", "at the playground"}, {"lake", "by the lake"},
	}
	objects = []string{"ball", "kite", "toy car", "box", "hat", "book", "doll", "cup", "balloon", "shell", "rock", "flower", "key", "teddy bear", "truck", "crayon", "boat", "bike"}
	feels   = []string{"sad", "happy", "scared", "excited", "angry", "tired", "surprised", "proud", "curious", "lonely"}
	verbs   = []string{"play", "run", "jump", "dance", "sing", "draw", "swim", "read", "explore", "dig"}
	weather = []string{"sunny", "rainy", "windy", "cold", "warm", "snowy", "bright", "cloudy"}
	family  = []string{"mom", "dad", "sister", "brother", "grandma", "grandpa", "friend"}
)

// a returns word with its indefinite article.
func a(word string) string {
	if strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}

// rng is splitmix64: a fixed, portable generator, so the prompts do not
// depend on the Go version.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

func (r *rng) pick(list []string) string { return list[r.intn(len(list))] }

// child picks a child's name with matching pronouns.
func (r *rng) child() (name, kind, subj, poss string) {
	if r.intn(2) == 0 {
		return r.pick(girls), "girl", "She", "her"
	}
	return r.pick(boys), "boy", "He", "his"
}

// opening draws one story opening.
func (r *rng) opening() string {
	name, kind, subj, poss := r.child()
	obj := "him"
	if poss == "her" {
		obj = "her"
	}
	place := places[r.intn(len(places))]
	switch r.intn(16) {
	case 0:
		return fmt.Sprintf("Once upon a time, there was a little %s named %s. %s", kind, name, subj)
	case 1:
		return fmt.Sprintf("One day, %s %s named %s", a(r.pick(animalAdjs)), r.pick(animals), r.pick(pets))
	case 2:
		return fmt.Sprintf("Once upon a time, there was %s %s who lived %s.", a(r.pick(animalAdjs)), r.pick(animals), place.at)
	case 3:
		other, _, _, _ := r.child()
		if other == name {
			other = r.pick(pets)
		}
		return fmt.Sprintf("%s and %s went to the %s to", name, other, place.name)
	case 4:
		return fmt.Sprintf("%s found %s %s %s. %s", name, a(r.pick(objectAdjs)), r.pick(objects), place.at, subj)
	case 5:
		return fmt.Sprintf("There was once %s %s who loved to %s.", a(r.pick(animalAdjs)), r.pick(animals), r.pick(verbs))
	case 6:
		return fmt.Sprintf("One sunny morning, %s saw %s %s", name, a(r.pick(animalAdjs)), r.pick(animals))
	case 7:
		return fmt.Sprintf("%s wanted to play with %s %s, but", name, poss, r.pick(objects))
	case 8:
		return fmt.Sprintf("Once upon a time, in %s %s, there lived %s.", a(r.pick(townAdjs)), r.pick(towns), a(r.pick(animals)))
	case 9:
		return fmt.Sprintf("Every day, %s liked to %s %s.", name, r.pick(verbs), place.at)
	case 10:
		return fmt.Sprintf("%s's %s gave %s %s %s. %s was", name, r.pick(family), obj, a(r.pick(objectAdjs)), r.pick(objects), name)
	case 11:
		return fmt.Sprintf("One day, %s and %s %s went to the %s.", name, poss, r.pick(family), place.name)
	case 12:
		return fmt.Sprintf("The %s %s was very %s because", r.pick(animalAdjs), r.pick(animals), r.pick(feels))
	case 13:
		return fmt.Sprintf("%s had %s %s that %s loved very much.", name, a(r.pick(objectAdjs)), r.pick(objects), strings.ToLower(subj))
	case 14:
		return fmt.Sprintf("It was %s day, and %s wanted to", a(r.pick(weather)), name)
	default:
		return fmt.Sprintf("Once upon a time, there was a %s named %s. %s liked to", kind, name, subj)
	}
}

// generate returns numTrain+numEval distinct openings of 5 to 15 words.
func generate() []string {
	r := &rng{s: seed}
	seen := make(map[string]bool)
	var out []string
	for len(out) < numTrain+numEval+numMore {
		s := r.opening()
		if n := len(strings.Fields(s)); n < 5 || n > 15 || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}

// encode renders prompts as JSONL.
func encode(prompts []string) ([]byte, error) {
	var b bytes.Buffer
	for _, p := range prompts {
		line, err := json.Marshal(struct {
			Prompt string `json:"prompt"`
		}{p})
		if err != nil {
			return nil, err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// files returns the contents of the three output files by name.
func files() (map[string][]byte, error) {
	all := generate()
	out := make(map[string][]byte, 4)
	first := all[:numTrain+numEval]
	for name, ps := range map[string][]string{
		"stories.jsonl":          first,
		"stories-train.jsonl":    first[:numTrain],
		"stories-eval.jsonl":     first[numTrain:],
		"stories-train-8k.jsonl": append(slices.Clip(first[:numTrain]), all[numTrain+numEval:]...),
	} {
		b, err := encode(ps)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

func main() {
	dir := flag.String("dir", filepath.Join("data", "prompts"), "output directory")
	flag.Parse()
	fs, err := files()
	if err != nil {
		fmt.Fprintln(os.Stderr, "genstories:", err)
		os.Exit(1)
	}
	for name, b := range fs {
		if err := atomicfile.WriteFile(filepath.Join(*dir, name), b); err != nil {
			fmt.Fprintln(os.Stderr, "genstories:", err)
			os.Exit(1)
		}
	}
}
