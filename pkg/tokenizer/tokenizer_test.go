package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// refCase is one text of the shared reference data's tokenizer cases, with
// the ids @huggingface/tokenizers 0.2.0 gives it (without and with special
// tokens) and its decoding.
type refCase struct {
	Text           string `json:"text"`
	IDs            []int  `json:"ids"`
	IDsWithSpecial []int  `json:"ids_with_special"`
	Decoded        string `json:"decoded"`
}

var models = []string{"llama3", "qwen3", "mistral", "llama2", "stories260k"}

func modelDir(name string) string {
	if name == "stories260k" {
		return testutil.SharedPath("models/stories260k")
	}
	return testutil.SharedPath(filepath.Join("reference", "tokenizers", name))
}

var (
	loadOnce  = map[string]*sync.Once{}
	loaded    = map[string]*Tokenizer{}
	loadErr   = map[string]error{}
	casesOnce sync.Once
	cases     map[string][]refCase
	casesErr  error
)

func init() {
	for _, m := range models {
		loadOnce[m] = new(sync.Once)
	}
}

// tok loads a reference tokenizer once per test binary (Llama-3's is 9 MB).
func tok(t testing.TB, name string) *Tokenizer {
	t.Helper()
	testutil.Shared(t, "")
	loadOnce[name].Do(func() {
		loaded[name], loadErr[name] = LoadDir(modelDir(name))
	})
	if loadErr[name] != nil {
		t.Fatalf("load %s: %v", name, loadErr[name])
	}
	return loaded[name]
}

func refCases(t testing.TB, name string) []refCase {
	t.Helper()
	testutil.Shared(t, "")
	casesOnce.Do(func() {
		var f struct {
			Models map[string][]refCase `json:"models"`
		}
		data, err := os.ReadFile(testutil.SharedPath("reference/tokenizers/tokenizer_cases.json"))
		if err != nil {
			casesErr = err
			return
		}
		casesErr = json.Unmarshal(data, &f)
		cases = f.Models
	})
	if casesErr != nil {
		t.Fatal(casesErr)
	}
	if len(cases[name]) == 0 {
		t.Fatalf("no reference cases for %s", name)
	}
	return cases[name]
}

func TestReferenceCases(t *testing.T) {
	for _, name := range models {
		t.Run(name, func(t *testing.T) {
			tk := tok(t, name)
			for i, c := range refCases(t, name) {
				if got := tk.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
					t.Errorf("case %d %q: ids\n got %v\nwant %v", i, c.Text, got, c.IDs)
				}
				if got := tk.Encode(c.Text, true); !slices.Equal(got, c.IDsWithSpecial) {
					t.Errorf("case %d %q: ids_with_special\n got %v\nwant %v", i, c.Text, got, c.IDsWithSpecial)
				}
				// The reference decoded `ids` keeping special tokens, with
				// tokenizer_config.json's clean_up_tokenization_spaces.
				if got := tk.Decode(c.IDs, false); got != c.Decoded {
					t.Errorf("case %d %q: decoded\n got %q\nwant %q", i, c.Text, got, c.Decoded)
				}
			}
		})
	}
}

// TestConcurrentEncode encodes from several goroutines at once (run with -race).
func TestConcurrentEncode(t *testing.T) {
	tk := tok(t, "qwen3")
	cs := refCases(t, "qwen3")
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 50 {
				c := cs[(g*7+k)%len(cs)]
				if got := tk.Encode(c.Text, true); !slices.Equal(got, c.IDsWithSpecial) {
					errs <- c.Text
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent encode of %q differs", s)
	}
}
