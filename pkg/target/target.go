// Package target opens the frozen target checkpoint that every stage works
// on: its config.json and generation_config.json, its weights, tokenizer and
// chat template, its fingerprint and the ids that end a generation. A stage
// loads only what it uses:
//
//   - Open: the configs, the weights memory-mapped and checked against the
//     config (no tensor converted), and the fingerprint (every byte hashed,
//     unless the cache knows the files). Training reads the embedding and
//     lm_head from here (OutputLayers) without building the model.
//   - OpenWithTokenizer: Open, and the tokenizer and chat template
//     (inspect).
//   - Load: all of it, the stop ids and the model, for the stages that run
//     the model (distill, capture, generate, eval). The model takes the
//     mapped files: it reads bf16 and f16 weights from them in place, and
//     releases them at once when it holds float32 copies of every weight.
package target

import (
	"errors"
	"fmt"

	"github.com/drafter-ai/drafter/pkg/arch"
	"github.com/drafter-ai/drafter/pkg/chat"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/fingerprint"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/pkg/tokenizer"
)

// Target is an opened target checkpoint. Close releases what it holds.
type Target struct {
	// Dir is the checkpoint folder ("" for a model built in memory).
	Dir string
	// Config is config.json.
	Config *checkpoint.Config
	// Gen is generation_config.json, nil when absent.
	Gen *checkpoint.GenerationConfig
	// Weights are the memory-mapped safetensors files; nil once Load has
	// built the model (which then owns them: see model.FromWeights) and
	// after Close.
	Weights *safetensors.Set

	// Fingerprint is the model's fingerprint (package fingerprint);
	// Fingerprinting says how it was obtained.
	Fingerprint    string
	Fingerprinting fingerprint.Stats
	// TokenizerHash is the hex SHA-256 of tokenizer.json as canonical JSON
	// ("" when the folder has none).
	TokenizerHash string

	// Tok is the tokenizer and Template the chat template (nil when the
	// model has none); both nil after Open.
	Tok      *tokenizer.Tokenizer
	Template *chat.Template
	// Stop are the ids that end a generation (set by Load and New):
	// generation_config.json's eos_token_id list (else config.json's), plus
	// the chat template's end-of-turn token when it is a single token.
	Stop []int
	// Model is the model, nil until Load.
	Model *model.Model
}

// Open opens the checkpoint in dir: config.json, generation_config.json
// when present, and the weights, memory-mapped and checked against the
// config (checkpoint.Open); and fingerprints it with cache (nil: no cache).
// No tensor is converted: the weights stay in the files until OutputLayers
// or Load reads them.
func Open(dir string, cache *filecache.Cache) (*Target, error) {
	return open(dir, cache, false)
}

// OpenWithTokenizer is Open, loading the tokenizer (tokenizer.json,
// tokenizer_config.json) and the chat template too.
func OpenWithTokenizer(dir string, cache *filecache.Cache) (*Target, error) {
	return open(dir, cache, true)
}

// Load opens the checkpoint in dir for running it: OpenWithTokenizer (with
// cache), the stop ids, and the model on be (cpu.DefaultBackend() when nil), its
// weights in the checkpoint's dtype. The model owns the checkpoint files
// from then on (Close releases them).
func Load(dir string, be cpu.Backend, cache *filecache.Cache) (*Target, error) {
	t, err := open(dir, cache, true)
	if err != nil {
		return nil, err
	}
	if err := t.loadModel(be); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// open is Open, loading the tokenizer too with withTokenizer: before the
// fingerprint, which may read every weight, so that a broken tokenizer
// fails fast.
func open(dir string, cache *filecache.Cache, withTokenizer bool) (*Target, error) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	t := &Target{Dir: dir, Config: ck.Config, Gen: ck.Generation, Weights: ck.Weights}
	if withTokenizer {
		if err := t.loadTokenizer(); err != nil {
			t.Close()
			return nil, err
		}
	}
	fp, err := fingerprint.Of(ck, cache)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("target: %w", err)
	}
	t.Fingerprint, t.Fingerprinting, t.TokenizerHash = fp.Fingerprint, fp.Stats, fp.Tokenizer
	return t, nil
}

// loadTokenizer loads the tokenizer and the chat template.
func (t *Target) loadTokenizer() error {
	tok, err := tokenizer.LoadDir(t.Dir)
	if err != nil {
		return err
	}
	tmpl, err := chat.Load(t.Dir)
	if err != nil {
		return err
	}
	t.Tok, t.Template = tok, tmpl
	return nil
}

// loadModel resolves the stop ids and builds the model from the mapped
// weights, handing them to it: it keeps the files mapped while it reads
// 16-bit weights from them, and closes them otherwise (also on an error).
func (t *Target) loadModel(be cpu.Backend) error {
	stop, err := stopIDs(t.Config, t.Gen, t.Tok, t.Template)
	if err != nil {
		return err
	}
	w := t.Weights
	t.Weights = nil
	m, err := model.FromWeights(t.Config, w, be)
	if err != nil {
		return err
	}
	t.Stop, t.Model = stop, m
	return nil
}

// New assembles a Target around a model built in memory (tests and
// benchmarks). cfg may be nil to use m.Config; gen and tmpl may be nil.
func New(m *model.Model, tok *tokenizer.Tokenizer, tmpl *chat.Template, cfg *checkpoint.Config, gen *checkpoint.GenerationConfig) (*Target, error) {
	if cfg == nil {
		cfg = m.Config
	}
	stop, err := stopIDs(cfg, gen, tok, tmpl)
	if err != nil {
		return nil, err
	}
	return &Target{Config: cfg, Gen: gen, Tok: tok, Template: tmpl, Stop: stop, Model: m}, nil
}

// stopIDs returns the ids that end a generation: generation_config.json's
// eos_token_id list when it sets one, else config.json's, then the chat
// template's end-of-turn token when it is a single token; each once.
func stopIDs(cfg *checkpoint.Config, gen *checkpoint.GenerationConfig, tok *tokenizer.Tokenizer, tmpl *chat.Template) ([]int, error) {
	eos := cfg.EOS
	if gen != nil && gen.HasEOS && len(gen.EOS) > 0 {
		eos = gen.EOS
	}
	var stop []int
	seen := map[int]bool{}
	for _, id := range eos {
		if id < 0 || id >= cfg.VocabSize {
			return nil, fmt.Errorf("target: eos_token_id %d is outside the vocabulary [0, %d)", id, cfg.VocabSize)
		}
		if !seen[id] {
			seen[id] = true
			stop = append(stop, id)
		}
	}
	if tmpl != nil {
		if eot := tmpl.EndOfTurn(); eot != "" {
			if id, ok := tok.TokenID(eot); ok && !seen[id] && id < cfg.VocabSize {
				stop = append(stop, id)
			}
		}
	}
	if len(stop) == 0 {
		return nil, errors.New("target: the model has no eos_token_id (config.json and generation_config.json) and no end-of-turn token; generation could never stop")
	}
	return stop, nil
}

// OutputLayers returns lm_head.weight [vocab, hidden] as float32 and, with
// withEmbed, model.embed_tokens.weight too (nil without). With tied
// embeddings lmHead is the embedding (the same slice as embed when both are
// returned). They come from the model when it is loaded (its float32
// weights themselves, or widened copies of 16-bit ones), else from the
// files, which hold them in the shape Open checked: training reads them
// without building the model.
func (t *Target) OutputLayers(withEmbed bool) (embed, lmHead []float32, err error) {
	if m := t.Model; m != nil {
		if withEmbed {
			embed = m.Embed.Float32()
		}
		if t.Config.TieWordEmbeddings && embed != nil {
			return embed, embed, nil
		}
		return embed, m.LMHead.Float32(), nil
	}
	if t.Weights == nil {
		return nil, nil, fmt.Errorf("target: %s is closed", t.Dir)
	}
	read := func(name string) ([]float32, error) {
		v, _, err := t.Weights.Float32(name)
		if err != nil {
			return nil, fmt.Errorf("target: reading %s from %s: %w", name, t.Dir, err)
		}
		return v, nil
	}
	tied := t.Config.TieWordEmbeddings
	if withEmbed || tied {
		if embed, err = read(arch.EmbedName); err != nil {
			return nil, nil, err
		}
	}
	if tied {
		lmHead = embed
		if !withEmbed {
			embed = nil
		}
		return embed, lmHead, nil
	}
	if lmHead, err = read(arch.LMHeadName); err != nil {
		return nil, nil, err
	}
	return embed, lmHead, nil
}

// Name is how the target is named in exported configs: config.json's
// _name_or_path when it has one, else the folder.
func (t *Target) Name() string {
	if s, ok := t.Config.Raw["_name_or_path"].(string); ok && s != "" {
		return s
	}
	return t.Dir
}

// TemplateHash returns the hex SHA-256 of the chat template's sources and
// special tokens (chat.Sources.Hash: the content, not the file it came from),
// "" when the model has none.
func (t *Target) TemplateHash() string {
	if t.Template == nil {
		return ""
	}
	return t.Template.Hash()
}

// releaseWeights unmaps the checkpoint files.
func (t *Target) releaseWeights() error {
	if t.Weights == nil {
		return nil
	}
	err := t.Weights.Close()
	t.Weights = nil
	if err != nil {
		return fmt.Errorf("target: closing the weights of %s: %w", t.Dir, err)
	}
	return nil
}

// Close releases the model and the mapped files; the configs, fingerprint,
// tokenizer and stop ids stay readable. Closing twice is harmless.
func (t *Target) Close() error {
	var err error
	if t.Model != nil {
		err = t.Model.Close()
		t.Model = nil
	}
	return errors.Join(err, t.releaseWeights())
}
