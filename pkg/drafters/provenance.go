package eval

import (
	"fmt"
	"path/filepath"
	"reflect"

	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/medusa"
)

// provenance is what a drafter.json records, as the trainers write it
// (train/medusa.Export, train/eagle3.Train). Every field is optional: one that
// a drafter.json lacks (an older version's, or one written by hand) is not
// compared.
type provenance struct {
	Fingerprint       string `json:"target_fingerprint"`
	LegacyFingerprint string `json:"fingerprint"`

	Method *string `json:"method"`
	Hidden *int    `json:"hidden_size"`
	Vocab  *int    `json:"vocab_size"`
	// Medusa.
	Heads        *int    `json:"num_heads"`
	Layers       *int    `json:"num_layers"`
	SharedLMHead *bool   `json:"shared_lm_head"`
	DType        *string `json:"dtype"`
	// EAGLE-3.
	Format        *string `json:"format"`
	DraftVocab    *int    `json:"draft_vocab_size"`
	FeatureLayers []int   `json:"feature_layers"`
	DefaultLayers *bool   `json:"default_feature_layers"`
}

// recordedField is one thing drafter.json and the export both say.
type recordedField struct {
	key      string // drafter.json's key
	recorded any    // nil when drafter.json does not record it
	export   any
	file     string // the export file that says it
}

// value returns *p, or nil when p is nil.
func value[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// agree returns an error naming drafter.json, the export file and the field
// at the first field where the two disagree.
func (info *DrafterInfo) agree(fields []recordedField) error {
	for _, f := range fields {
		if f.recorded == nil || reflect.DeepEqual(f.recorded, f.export) {
			continue
		}
		return fmt.Errorf("eval: %s records %s %s, but the export %s has %s: they describe different drafters (an export from another run beside this drafter.json, or one edited since); evaluate the export with the drafter.json its training run wrote",
			info.Provenance, f.key, show(f.recorded), f.file, show(f.export))
	}
	return nil
}

// show formats a recorded value; a nil list of feature layers means the
// engines' defaults.
func show(v any) string {
	if ids, ok := v.([]int); ok && ids == nil {
		return "none (the engines' default feature layers)"
	}
	return fmt.Sprintf("%v", v)
}

// checkMedusa compares a Medusa export with the drafter.json found for it.
func (info *DrafterInfo) checkMedusa(ld *medusa.Loaded) error {
	p := info.prov
	if p == nil {
		return nil
	}
	h := ld.Heads
	fields := []recordedField{
		{"method", value(p.Method), string(KindMedusa), info.Dir},
		{"num_heads", value(p.Heads), h.Heads, ld.Config},
		{"num_layers", value(p.Layers), h.Layers, ld.Config},
		{"hidden_size", value(p.Hidden), h.Hidden, ld.Weights},
		{"vocab_size", value(p.Vocab), h.Vocab, ld.Weights},
		{"dtype", value(p.DType), string(ld.DType), ld.Weights},
	}
	if ld.Layout == medusa.VLLMDir { // FasterDecoding's layout has no shared lm_head
		fields = append(fields, recordedField{"shared_lm_head", value(p.SharedLMHead), h.SharedLMHead, ld.Config})
	}
	return info.agree(fields)
}

// checkEagle compares an EAGLE-3 export with the drafter.json found for it.
func (info *DrafterInfo) checkEagle(d *eagle3.Draft) error {
	p := info.prov
	if p == nil {
		return nil
	}
	cfg := filepath.Join(info.Dir, "config.json")
	g := d.Geometry
	var layers any
	switch {
	case p.DefaultLayers != nil && *p.DefaultLayers:
		layers = []int(nil)
	case p.FeatureLayers != nil:
		layers = p.FeatureLayers
	}
	return info.agree([]recordedField{
		{"method", value(p.Method), string(KindEagle3), info.Dir},
		{"format", value(p.Format), info.Layout, cfg},
		{"hidden_size", value(p.Hidden), g.Hidden, cfg},
		{"vocab_size", value(p.Vocab), g.Vocab, cfg},
		{"draft_vocab_size", value(p.DraftVocab), g.DraftVocab, cfg},
		{"feature_layers", layers, d.LayerIDs, cfg},
	})
}
