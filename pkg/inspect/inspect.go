// Package inspect summarises what drafter reads from a Hugging Face checkpoint
// folder: architecture, geometry, weights, tokenizer, chat template, the EAGLE-3
// default feature layers and the checkpoint fingerprint; and, for a drafter
// folder, what drafter eval finds there (DrafterReport).
package inspect

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/drafters/methods"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/fingerprint"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/target"
)

// Report is the summary of one checkpoint.
type Report struct {
	Dir           string         `json:"dir"`
	ModelType     string         `json:"model_type"`
	Architectures []string       `json:"architectures,omitempty"`
	Parameters    int64          `json:"parameters"`
	DTypes        map[string]int `json:"dtypes"` // tensor count per dtype
	// WeightBytes is the memory the weights occupy once loaded (the
	// stages that run the model), per dtype they are held in ("bf16",
	// "f16", "f32"): 16-bit matrices stay in their dtype, read in place
	// from the mapped files (WeightsMapped of the total), everything else
	// is held as float32 (model.Footprint).
	WeightBytes      map[string]int64 `json:"weight_bytes"`
	WeightsMapped    int64            `json:"weights_mapped_bytes"`
	Layers           int              `json:"num_hidden_layers"`
	HiddenSize       int              `json:"hidden_size"`
	IntermediateSize int              `json:"intermediate_size"`
	Heads            int              `json:"num_attention_heads"`
	KVHeads          int              `json:"num_key_value_heads"`
	HeadDim          int              `json:"head_dim"`
	VocabSize        int              `json:"vocab_size"`
	MaxPositions     int              `json:"max_position_embeddings"`
	// Context is the longest sequence drafter runs: MaxPositions (sliding
	// layers attend within their window of it).
	Context int `json:"context"`
	// SlidingWindow is the window of the layers SlidingLayers lists, which
	// attend to their last SlidingWindow positions only.
	SlidingWindow int   `json:"sliding_window,omitempty"`
	SlidingLayers []int `json:"sliding_layers,omitempty"`
	// AttnSoftcap and FinalSoftcap are the soft-caps of the attention
	// scores and the final logits (Gemma-2), 0 for none.
	AttnSoftcap       float64 `json:"attn_logit_softcapping,omitempty"`
	FinalSoftcap      float64 `json:"final_logit_softcapping,omitempty"`
	TieWordEmbeddings bool    `json:"tie_word_embeddings"`
	RopeTheta         float64 `json:"rope_theta"`
	RopeScaling       string  `json:"rope_scaling,omitempty"`
	EOS               []int   `json:"eos_token_ids,omitempty"`
	TokenizerFamily   string  `json:"tokenizer_family"`
	TokenizerVocab    int     `json:"tokenizer_vocab"`
	ChatTemplate      bool    `json:"chat_template"`
	EAGLE3Layers      [3]int  `json:"eagle3_feature_layers"`
	// CaptureLayers are the hidden_states indices drafter distill captures
	// by default (every method's default layers); empty when some method's
	// defaults do not fit the target.
	CaptureLayers []int  `json:"capture_layers"`
	Fingerprint   string `json:"fingerprint"`
	// Fingerprinting says how the fingerprint was obtained: bytes hashed and
	// the rate, or from the cache.
	Fingerprinting fingerprint.Stats `json:"fingerprinting"`
}

// Inspect opens the checkpoint in dir as the stages do (target.Open: configs
// and weights checked, fingerprinted), with its tokenizer and chat template,
// and summarises it; cache (nil: none) keeps the tensor digests of the
// fingerprint. No weight is converted.
func Inspect(dir string, cache *filecache.Cache) (*Report, error) {
	t, err := target.OpenWithTokenizer(dir, cache)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	c := t.Config
	r := &Report{
		Dir: dir, ModelType: c.ModelType, Architectures: c.Architectures, Parameters: c.NumParams(),
		DTypes: map[string]int{}, Layers: c.NumLayers, HiddenSize: c.HiddenSize,
		IntermediateSize: c.IntermediateSize, Heads: c.NumHeads, KVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
		VocabSize: c.VocabSize, MaxPositions: c.MaxPositions, Context: c.MaxPositions,
		AttnSoftcap: c.AttnSoftcap, FinalSoftcap: c.FinalSoftcap,
		TieWordEmbeddings: c.TieWordEmbeddings,
		RopeTheta:         c.RopeTheta, EOS: eosIDs(c, t.Gen), TokenizerFamily: t.Tok.Family(), TokenizerVocab: t.Tok.VocabSize(),
		ChatTemplate: t.Template != nil, EAGLE3Layers: deagle3.DefaultLayers(c.NumLayers), Fingerprint: t.Fingerprint, Fingerprinting: t.Fingerprinting,
	}
	r.CaptureLayers, _ = methods.DefaultLayers(c)
	if s := c.RopeScaling; s != nil {
		r.RopeScaling = fmt.Sprintf("%s (factor %g)", s.Type, s.Factor)
	}
	if c.LocalRopeTheta != 0 {
		r.RopeScaling = strings.TrimPrefix(r.RopeScaling+fmt.Sprintf("; sliding layers: theta %g", c.LocalRopeTheta), "; ")
	}
	for l := range c.NumLayers {
		if w := c.Window(l); w > 0 {
			r.SlidingWindow = w
			r.SlidingLayers = append(r.SlidingLayers, l)
		}
	}
	for _, spec := range c.Tensors() {
		if info, ok := t.Weights.Info(spec.Name); ok {
			r.DTypes[string(info.DType)]++
		}
	}
	mem, err := model.Footprint(c, t.Weights)
	if err != nil {
		return nil, fmt.Errorf("inspect: %s: %w", dir, err)
	}
	r.WeightBytes, r.WeightsMapped = map[string]int64{}, mem.Mapped
	for dt, n := range mem.Bytes {
		r.WeightBytes[dt.String()] = n
	}
	return r, nil
}

// eosIDs merges the end-of-sequence ids of generation_config.json (which
// serving engines prefer) and config.json, in that order, without duplicates.
func eosIDs(c *checkpoint.Config, gen *checkpoint.GenerationConfig) []int {
	var ids []int
	seen := map[int]bool{}
	var lists [][]int
	if gen != nil {
		lists = append(lists, gen.EOS)
	}
	lists = append(lists, c.EOS)
	for _, l := range lists {
		for _, id := range l {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// WriteText prints the report for people.
func (r *Report) WriteText(w io.Writer) error {
	var dts []string
	for k, v := range r.DTypes {
		dts = append(dts, fmt.Sprintf("%s x%d", k, v))
	}
	sort.Strings(dts)
	tmpl := "none (raw text prompts)"
	if r.ChatTemplate {
		tmpl = "yes"
	}
	context := fmt.Sprint(r.Context)
	attn := fmt.Sprintf("%d heads, %d KV heads, head_dim %d", r.Heads, r.KVHeads, r.HeadDim)
	if len(r.SlidingLayers) == r.Layers {
		attn += fmt.Sprintf("; sliding window %d on every layer", r.SlidingWindow)
	} else if len(r.SlidingLayers) > 0 {
		attn += fmt.Sprintf("; sliding window %d on layers %v, the others global", r.SlidingWindow, r.SlidingLayers)
	}
	if r.AttnSoftcap > 0 || r.FinalSoftcap > 0 {
		attn += fmt.Sprintf("; soft-caps: scores %g, logits %g (0: none)", r.AttnSoftcap, r.FinalSoftcap)
	}
	rope := fmt.Sprintf("theta %g", r.RopeTheta)
	if r.RopeScaling != "" {
		rope += ", scaling " + r.RopeScaling
	}
	lines := [][2]string{
		{"model", r.Dir},
		{"architecture", fmt.Sprintf("%s (%s)", r.ModelType, strings.Join(r.Architectures, ", "))},
		{"parameters", fmt.Sprintf("%d (%s)", r.Parameters, human(r.Parameters))},
		{"dtypes", strings.Join(dts, ", ")},
		{"weights", r.weightsText()},
		{"layers", fmt.Sprint(r.Layers)},
		{"hidden size", fmt.Sprint(r.HiddenSize)},
		{"intermediate size", fmt.Sprint(r.IntermediateSize)},
		{"attention", attn},
		{"rope", rope},
		{"context", context},
		{"vocab", fmt.Sprintf("%d (tokenizer: %s BPE, %d tokens)", r.VocabSize, r.TokenizerFamily, r.TokenizerVocab)},
		{"tied lm_head", fmt.Sprint(r.TieWordEmbeddings)},
		{"eos ids", fmt.Sprint(r.EOS)},
		{"chat template", tmpl},
		{"eagle3 layers", fmt.Sprintf("%v (Hugging Face hidden_states indices 2, L/2, L-3; 1, (L+1)/2, L below 7 layers)", r.EAGLE3Layers)},
		{"capture layers", fmt.Sprintf("%v (drafter distill's default: every method's default layers)", r.CaptureLayers)},
		{"fingerprint", r.Fingerprint},
		{"fingerprinted", r.Fingerprinting.String()},
	}
	for _, l := range lines {
		if _, err := fmt.Fprintf(w, "%-18s %s\n", l[0]+":", l[1]); err != nil {
			return err
		}
	}
	return nil
}

// weightsText describes WeightBytes, the largest dtype first: "2.20 GB
// bf16 (mapped), 180.22 kB f32".
func (r *Report) weightsText() string {
	dts := make([]string, 0, len(r.WeightBytes))
	for dt := range r.WeightBytes {
		dts = append(dts, dt)
	}
	sort.Slice(dts, func(i, j int) bool {
		if r.WeightBytes[dts[i]] != r.WeightBytes[dts[j]] {
			return r.WeightBytes[dts[i]] > r.WeightBytes[dts[j]]
		}
		return dts[i] < dts[j]
	})
	parts := make([]string, len(dts))
	for i, dt := range dts {
		parts[i] = fingerprint.ByteSize(r.WeightBytes[dt]) + " " + dt
		if dt != "f32" && r.WeightsMapped > 0 {
			parts[i] += " (mapped)"
		}
	}
	return strings.Join(parts, ", ")
}

func human(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
