package run

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/fingerprint"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/train/eagle3"
)

// Target is what training reads from the frozen target checkpoint.
type Target struct {
	// Dir is the checkpoint folder.
	Dir string
	// Config is its parsed config.json.
	Config *checkpoint.Config
	// Fingerprint is the target's fingerprint (package fingerprint): captures
	// must record the same.
	Fingerprint string
	// Embed is model.embed_tokens.weight [V, H] as float32, nil unless requested.
	Embed []float32
	// LMHead is lm_head.weight [V, H], or the embedding (the same slice as Embed
	// when both were loaded) when the model ties them.
	LMHead []float32
}

const (
	embedName  = "model.embed_tokens.weight"
	lmHeadName = "lm_head.weight"
)

// OpenTarget opens the checkpoint in dir, fingerprints it (with cache, nil for
// none) and loads its output layer as float32 (and, with withEmbed, its input
// embedding). The checkpoint files are closed before it returns.
func OpenTarget(dir string, withEmbed bool, cache *filecache.Cache) (*Target, error) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	fp, err := fingerprint.Of(ck, cache)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	c := ck.Config
	t := &Target{Dir: dir, Config: c, Fingerprint: fp.Fingerprint}
	load := func(name string) ([]float32, error) {
		v, shape, err := ck.Weights.Float32(name)
		if err != nil {
			return nil, fmt.Errorf("train: reading %s from %s: %w", name, dir, err)
		}
		if len(shape) != 2 || shape[0] != c.VocabSize || shape[1] != c.HiddenSize {
			return nil, fmt.Errorf("train: %s in %s has shape %v, want [%d %d] (vocab_size, hidden_size)", name, dir, shape, c.VocabSize, c.HiddenSize)
		}
		return v, nil
	}
	if withEmbed || c.TieWordEmbeddings {
		if t.Embed, err = load(embedName); err != nil {
			return nil, err
		}
	}
	if c.TieWordEmbeddings {
		t.LMHead = t.Embed
		if !withEmbed {
			t.Embed = nil
		}
	} else if t.LMHead, err = load(lmHeadName); err != nil {
		return nil, err
	}
	return t, nil
}

// Name is how the target is named in exported configs: config.json's
// _name_or_path when it has one, else the folder.
func (t *Target) Name() string {
	if s, ok := t.Config.Raw["_name_or_path"].(string); ok && s != "" {
		return s
	}
	return t.Dir
}

// EAGLE3Target describes the target to the EAGLE-3 trainer (which fills in
// DraftVocab); the embedding must have been loaded.
func (t *Target) EAGLE3Target() (*eagle3.Target, error) {
	if t.Embed == nil {
		return nil, fmt.Errorf("train: target %s was opened without its embedding, which EAGLE-3 needs", t.Dir)
	}
	c := t.Config
	g := deagle3.Geometry{
		Hidden: c.HiddenSize, Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
		Intermediate: c.IntermediateSize, RMSNormEps: c.RMSNormEps, RopeTheta: c.RopeTheta,
		MaxPositions: c.MaxPositions, Vocab: c.VocabSize,
	}
	if rs := c.RopeScaling; rs != nil {
		g.RopeScaling = &nn.RopeScaling{Type: rs.Type, Factor: rs.Factor, LowFreqFactor: rs.LowFreqFactor,
			HighFreqFactor: rs.HighFreqFactor, OriginalMaxPositions: rs.OriginalMaxPositions}
	}
	return &eagle3.Target{Geometry: g, Embed: t.Embed, LMHead: t.LMHead}, nil
}

// LayerError is a set of EAGLE-3 feature layers the target cannot use: an
// index outside [1, L], or not 3 of them. FromOverride tells whether the
// layers were the caller's (the --layers flag) rather than the target's
// defaults.
type LayerError struct {
	FromOverride bool
	Err          error
}

// Error describes the failure.
func (e *LayerError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *LayerError) Unwrap() error { return e.Err }

// FeatureLayers returns the three Hugging Face hidden_states indices EAGLE-3
// fuses: override when given (it must hold 3), else drafter's defaults for
// the target (checkpoint.Config.EAGLE3DraftLayers: 2, L/2, L-3 from 7 layers
// up). It reports whether they are the engines' defaults (2, L/2, L-3),
// which an export may leave unwritten, and refuses indices outside [1, L]
// (0 is the embedding output, L the last layer's output) with a *LayerError.
//
// It takes the override's order as given: the engines' own defaults repeat a
// layer below 7 layers (2, 2, 2 for 5), and a caller may train on them.
// drafter train refuses --layers that are not ascending and distinct, since
// the serving engines gather the states in ascending order, each once.
func (t *Target) FeatureLayers(override []int) (layers [3]int, isDefault bool, err error) {
	def := t.Config.EAGLE3Layers()
	L := t.Config.NumLayers
	if override == nil {
		layers = t.Config.EAGLE3DraftLayers()
		isDefault = layers == def
	} else {
		if len(override) != 3 {
			return layers, false, &LayerError{true, fmt.Errorf("train: --layers for eagle3 takes 3 Hugging Face hidden_states indices (low,mid,high), got %d: %v", len(override), override)}
		}
		copy(layers[:], override)
		isDefault = layers == def
	}
	for c, k := range layers {
		if k < 1 || k > L {
			src := "the target's default feature layers"
			if override != nil {
				src = "--layers"
			}
			return layers, false, &LayerError{override != nil, fmt.Errorf("train: EAGLE-3 %s feature layer is hidden_states index %d from %s, outside [1, %d] for this %d-layer target (0 is the embedding output)%s",
				featureName(c), k, src, L, L, smallModelHint(L, override))}
		}
	}
	return layers, isDefault, nil
}

func smallModelHint(L int, override []int) string {
	if override == nil {
		return fmt.Sprintf("; pass --layers with 3 indices in [1, %d]", L)
	}
	return ""
}

// featureName names feature c (0, 1, 2) of the EAGLE-3 fusion.
func featureName(c int) string {
	switch c {
	case 0:
		return "low"
	case 1:
		return "middle"
	}
	return "high"
}
