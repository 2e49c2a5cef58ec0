package eagle3

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/drafter-ai/drafter/pkg/atomicfile"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/nn"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// ExportOptions says how to write a trained draft.
type ExportOptions struct {
	// Format is FormatNative (default) or FormatSpeculators.
	Format string
	// LayerIDs are the Hugging Face hidden_states indices of the three fused
	// target features (low, mid, high). When DefaultLayers is true (they are
	// 2, L/2, L-3) the ids are left out of the config so each engine applies
	// its own default, which selects the same tensors.
	LayerIDs      []int
	DefaultLayers bool
	// TargetName and TargetArchitectures describe the verifier (speculators
	// layout: speculators_config.verifier).
	TargetName          string
	TargetArchitectures []string
	// SpeculativeTokens is the proposal length written in the speculators
	// layout (default 3, the speculators TTT length).
	SpeculativeTokens int
}

// Export writes the draft into dir: config.json and model.safetensors (float32
// weights, d2t int64 offsets, t2d bool; no embedding: the engines use the
// target's). Files are written atomically. (Train writes drafter.json beside
// the export folder, at the top of its output folder.) Layer ids must pass
// CheckLayerIDs; a draft with a NaN or infinite weight is refused before
// anything is written.
//
// The layout (opt.Format) writes the config.json: its format file says how
// (format_native.go, format_speculators.go), the feature layers included,
// which it leaves out when they are the engines' defaults.
func Export(dir string, g Geometry, p *Params, voc *Vocab, opt ExportOptions) error {
	if err := g.Validate(); err != nil {
		return err
	}
	if len(voc.IDs) != g.DraftVocab || len(voc.T2D) != g.Vocab {
		return fmt.Errorf("eagle3: export: vocabulary of %d ids over %d targets does not match geometry N=%d V=%d", len(voc.IDs), len(voc.T2D), g.DraftVocab, g.Vocab)
	}
	name := opt.Format
	if name == "" {
		name = FormatNative
	}
	f := formatNamed(name)
	if f == nil {
		return fmt.Errorf("eagle3: export format %q is not %q or %q", name, FormatNative, FormatSpeculators)
	}
	if !opt.DefaultLayers {
		if err := CheckLayerIDs(opt.LayerIDs, 0); err != nil {
			return fmt.Errorf("eagle3: export: feature layers %v: %w", opt.LayerIDs, err)
		}
	}
	var ts []safetensors.Tensor
	for _, t := range p.Tensors(g) {
		ts = append(ts, safetensors.F32Tensor(layerKey(f.prefix(), t.Name), t.Shape, t.Data))
	}
	if err := safetensors.CheckAllFinite(ts); err != nil {
		return fmt.Errorf("eagle3: refusing to export a draft with non-finite weights into %s (nothing written): %w; training diverged or resumed from a damaged checkpoint", dir, err)
	}
	ts = append(ts, safetensors.I64Tensor("d2t", []int{len(voc.D2T)}, voc.D2T), safetensors.BoolTensor("t2d", []int{len(voc.T2D)}, voc.T2D))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("eagle3: export: %w", err)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, weightsFile), ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("eagle3: export: %w", err)
	}
	return atomicfile.WriteJSON(filepath.Join(dir, drafters.ConfigFile), f.config(g, opt))
}

// llamaConfig is the Llama geometry block shared by both layouts.
func llamaConfig(g Geometry) map[string]any {
	c := map[string]any{
		"model_type":              "llama",
		"num_hidden_layers":       1,
		"hidden_size":             g.Hidden,
		"intermediate_size":       g.Intermediate,
		"num_attention_heads":     g.Heads,
		"num_key_value_heads":     g.KVHeads,
		"head_dim":                g.HeadDim,
		"rms_norm_eps":            g.RMSNormEps,
		"rope_theta":              g.RopeTheta,
		"max_position_embeddings": g.MaxPositions,
		"vocab_size":              g.Vocab,
		"hidden_act":              "silu",
		"tie_word_embeddings":     false,
		"attention_bias":          false,
		"mlp_bias":                false,
		"torch_dtype":             "float32",
	}
	if s := g.RopeScaling; s != nil {
		rs := map[string]any{"rope_type": s.Type, "factor": s.Factor}
		if s.Type == "llama3" {
			rs["low_freq_factor"] = s.LowFreqFactor
			rs["high_freq_factor"] = s.HighFreqFactor
			rs["original_max_position_embeddings"] = s.OriginalMaxPositions
		}
		c["rope_scaling"] = rs
	}
	return c
}

func shifted(ids []int, d int) []int {
	out := make([]int, len(ids))
	for i, v := range ids {
		out[i] = v + d
	}
	return out
}

// CheckLayerIDs checks feature-layer ids given as Hugging Face hidden_states
// indices: three of them, strictly increasing, at least 1 (index 0 is the
// embedding output) and, when layers > 0, at most layers, the target's
// num_hidden_layers. The engines gather the auxiliary hidden states in
// ascending layer order, as the target's forward pass produces them, and a
// repeated layer once: ids out of order or repeated would feed the draft its
// features in another order than it was trained on.
func CheckLayerIDs(ids []int, layers int) error {
	if len(ids) != 3 {
		return fmt.Errorf("%d layers; want 3 (low, middle, high)", len(ids))
	}
	for i, id := range ids {
		if i > 0 && id <= ids[i-1] {
			return errors.New("not strictly increasing: the engines gather the auxiliary hidden states in ascending layer order (a repeated layer once), so the draft would get its features in another order than it was trained on")
		}
		if id < 1 {
			return fmt.Errorf("layer %d is not a decoder layer's output (hidden_states index 0 is the embedding output; layers are 1 and up)", id)
		}
		if layers > 0 && id > layers {
			return fmt.Errorf("layer %d is outside the target's hidden_states indices 1 to %d (its num_hidden_layers)", id, layers)
		}
	}
	return nil
}

// Config keys naming the feature layers.
const (
	layerIDsKey      = "eagle_aux_hidden_state_layer_ids"
	eagleLayerIDsKey = "eagle_config.eagle_aux_hidden_state_layer_ids"
)

// draftConfig is the part of either export layout's config.json that LoadDraft
// reads.
type draftConfig struct {
	Architectures   []string        `json:"architectures"`
	SpeculatorsType string          `json:"speculators_model_type"`
	Layer           *draftConfig    `json:"transformer_layer_config"`
	DraftVocab      int             `json:"draft_vocab_size"`
	NormBeforeRes   *bool           `json:"norm_before_residual"`
	FCNorm          *bool           `json:"fc_norm"`
	NormBeforeFC    *bool           `json:"norm_before_fc"`
	NormOutput      *bool           `json:"norm_output"`
	LayerIDs        []int           `json:"eagle_aux_hidden_state_layer_ids"`
	EagleConfig     *eagleConfig    `json:"eagle_config"`
	NumLayers       *int            `json:"num_hidden_layers"`
	Hidden          int             `json:"hidden_size"`
	Intermediate    int             `json:"intermediate_size"`
	Heads           int             `json:"num_attention_heads"`
	KVHeads         int             `json:"num_key_value_heads"`
	HeadDim         int             `json:"head_dim"`
	RMSNormEps      float64         `json:"rms_norm_eps"`
	RopeTheta       float64         `json:"rope_theta"`
	RopeScaling     json.RawMessage `json:"rope_scaling"`
	MaxPositions    int             `json:"max_position_embeddings"`
	Vocab           int             `json:"vocab_size"`
	TargetHidden    int             `json:"target_hidden_size"`
}

// eagleConfig is the native layout's eagle_config block.
type eagleConfig struct {
	// LayerIDs are "output of layer k" ids: HF hidden_states index - 1.
	LayerIDs []int `json:"eagle_aux_hidden_state_layer_ids"`
	// NormBeforeFC and ReturnHiddenPostNorm are TensorRT-LLM's spellings
	// of norm_before_fc and norm_output (vLLM also prefers the first over
	// the top-level key).
	NormBeforeFC         *bool `json:"norm_before_fc"`
	ReturnHiddenPostNorm *bool `json:"return_hidden_post_norm"`
}

// Config keys of the EAGLE-3.1 switches (Norms), top-level in both layouts,
// and their eagle_config spellings in the native one.
const (
	fcNormKey              = "fc_norm"
	normBeforeFCKey        = "norm_before_fc"
	normOutputKey          = "norm_output"
	normBeforeResidualKey  = "norm_before_residual"
	eagleNormBeforeFCKey   = "eagle_config.norm_before_fc"
	eaglePostNormOutputKey = "eagle_config.return_hidden_post_norm"
)

// normsConfig writes the four switches of g explicitly, as both layouts do:
// an engine that finds a key absent assumes its own default, which is not
// always false (vLLM's speculators translator assumes norm_before_residual
// true), and writing them all says which variant the draft is.
func normsConfig(cfg map[string]any, g Geometry) {
	cfg[fcNormKey] = g.FCNorm
	cfg[normBeforeFCKey] = g.NormBeforeFC
	cfg[normOutputKey] = g.NormOutput
	cfg[normBeforeResidualKey] = false
}

// norms reads the EAGLE-3.1 switches from a config (at cfgPath) of either
// layout, an absent key false. It refuses fc_norm with norm_before_fc, and,
// in the native layout, eagle_config spellings that disagree with the
// top-level keys: vLLM takes eagle_config's norm_before_fc over the
// top-level one and SGLang reads only the top-level one, and TensorRT-LLM
// feeds the normed output forward when either norm_output or
// eagle_config.return_hidden_post_norm is true while vLLM and SGLang read
// only norm_output, so the engines would run different drafts.
func (c *draftConfig) norms(cfgPath string) (Norms, error) {
	b := func(v *bool) bool { return v != nil && *v }
	n := Norms{FCNorm: b(c.FCNorm), NormBeforeFC: b(c.NormBeforeFC), NormOutput: b(c.NormOutput)}
	if e := c.EagleConfig; e != nil {
		if e.NormBeforeFC != nil && *e.NormBeforeFC != n.NormBeforeFC {
			return n, fmt.Errorf("eagle3: %s: %s is %v but %s is %v: vLLM and TensorRT-LLM read the first, SGLang the second, so the engines would run different drafts",
				cfgPath, eagleNormBeforeFCKey, *e.NormBeforeFC, normBeforeFCKey, n.NormBeforeFC)
		}
		if e.ReturnHiddenPostNorm != nil && *e.ReturnHiddenPostNorm != n.NormOutput {
			return n, fmt.Errorf("eagle3: %s: %s is %v but %s is %v: TensorRT-LLM feeds the normed output forward when either is true, vLLM and SGLang read only %s, so the engines would run different drafts",
				cfgPath, eaglePostNormOutputKey, *e.ReturnHiddenPostNorm, normOutputKey, n.NormOutput, normOutputKey)
		}
	}
	if n.FCNorm && n.NormBeforeFC {
		return n, fmt.Errorf("eagle3: %s: %s and %s are both true; they are mutually exclusive (one norm per feature layer before fc, or one over their concatenation), and the engines disagree on what both would mean",
			cfgPath, fcNormKey, normBeforeFCKey)
	}
	return n, nil
}

// layerIDs returns the feature layers the config names, as HF hidden_states
// indices, or nil when it names none (each engine then uses its default).
// Where both keys are present they must name the same layers: SGLang reads
// eagle_config's, vLLM the top-level one.
func (c *draftConfig) layerIDs(cfgPath string) ([]int, error) {
	var ids, raw []int
	key := ""
	if c.EagleConfig != nil && len(c.EagleConfig.LayerIDs) > 0 {
		raw = c.EagleConfig.LayerIDs
		ids, key = shifted(raw, 1), eagleLayerIDsKey
	}
	if len(c.LayerIDs) > 0 {
		if ids != nil && !slices.Equal(ids, c.LayerIDs) {
			return nil, fmt.Errorf("eagle3: %s: %s %v (layer outputs, HF index - 1, so hidden_states %v) and %s %v (hidden_states indices) name different layers: SGLang reads the first and vLLM the second, so the engines would feed the draft different features",
				cfgPath, eagleLayerIDsKey, raw, ids, layerIDsKey, c.LayerIDs)
		}
		raw, ids, key = c.LayerIDs, c.LayerIDs, layerIDsKey
	}
	if ids == nil {
		return nil, nil
	}
	if err := CheckLayerIDs(ids, 0); err != nil {
		return nil, fmt.Errorf("eagle3: %s: %s %v: %w", cfgPath, key, raw, err)
	}
	return ids, nil
}

// nativePrefix is the decoder layer's key prefix in Params.Tensors' names
// (the native layout's).
const nativePrefix = "midlayer."

// weightsFile is the export's weights file.
const weightsFile = "model.safetensors"

// ExportFiles lists the files Export writes into its folder, for the
// SHA256SUMS its caller writes once drafter.json is beside them
// (drafters.WriteSums).
func ExportFiles() []string { return []string{drafters.ConfigFile, weightsFile} }

// layerKey is Params.Tensors' name in the layout whose decoder-layer keys
// start with prefix.
func layerKey(prefix, name string) string {
	if rest, ok := strings.CutPrefix(name, nativePrefix); ok {
		return prefix + rest
	}
	return name
}

// format is one export layout of the draft: a format_*.go file holds its
// writer, detector and loader.
type format interface {
	// name is the layout's name (ExportOptions.Format, eval's reports).
	name() string
	// prefix is the layout's key prefix of the decoder layer's tensors.
	prefix() string
	// config is the config.json the layout writes for a draft.
	config(g Geometry, opt ExportOptions) map[string]any
	// detect reports whether a config.json (at cfgPath) is of the layout;
	// an error when it is of the layout in a variant drafter cannot run.
	detect(cfgPath string, c *draftConfig) (bool, error)
	// geometry checks a config of the layout and returns the block that
	// holds the decoder layer's geometry.
	geometry(cfgPath string, c *draftConfig) (*draftConfig, error)
}

// formats lists the layouts in the order Detect tries them.
func formats() []format { return []format{speculators{}, native{}} }

// formatNamed returns the layout called name, nil when there is none.
func formatNamed(name string) format {
	for _, f := range formats() {
		if f.name() == name {
			return f
		}
	}
	return nil
}

// unusedTensor explains why a draft of this layout (tensor prefix prefix)
// has no use for tensor name.
func unusedTensor(name, prefix string) string {
	other := map[string]string{"midlayer.": "layers.0.", "layers.0.": "midlayer."}[prefix]
	switch {
	case strings.HasPrefix(name, "fc_norm."):
		return fmt.Sprintf("it is fc_norm's weight, and the config's %s is not true (the engines would load the draft without the norm and run another function than it was trained as)", fcNormKey)
	case name == FCInputNormKey:
		return fmt.Sprintf("it is norm_before_fc's weight, and the config's %s is not true (vLLM and TensorRT-LLM would skip it and run another function than the draft was trained as)", normBeforeFCKey)
	case strings.HasSuffix(name, "embed_tokens.weight"):
		return "drafter runs the draft on the target's embedding, as SGLang does (vLLM would use this one instead); export the draft without it"
	case strings.HasPrefix(name, other):
		return fmt.Sprintf("the config is of the layout whose decoder-layer keys start with %q, not %q", prefix, other)
	}
	return fmt.Sprintf("the draft is one decoder layer: its tensors are fc.weight, %s*, norm.weight, lm_head.weight, d2t and t2d", prefix)
}

// neededBy names the config key that makes tensor name necessary, for the
// EAGLE-3.1 norms' weights.
func neededBy(name string) string {
	switch {
	case strings.HasPrefix(name, "fc_norm."):
		return fmt.Sprintf(" (its %s is true)", fcNormKey)
	case name == FCInputNormKey:
		return fmt.Sprintf(" (its %s is true)", normBeforeFCKey)
	}
	return ""
}

// LoadDraft reads an exported draft (either layout: speculators when the
// config names a speculators_model_type, else native) from dir. embed is the
// target's input embedding [V, H] in its dtype (exports carry none: the
// engines use the target's).
//
// The config and the weights must agree exactly: every tensor the config
// implies is present with its shape and type, every tensor of the weights is
// one of them, and every weight is finite. The config's EAGLE-3.1 switches
// (fc_norm, norm_before_fc, norm_output; see Norms) select the forward the
// draft runs and the norms' weights it needs; fc_norm with norm_before_fc,
// and norm_before_residual true, are refused. The feature layers the config
// names must be strictly increasing (see CheckLayerIDs); the native layout's
// two keys for them must agree.
func LoadDraft(dir string, embed tensor.Matrix, dev tensor.Device) (*Draft, error) {
	return loadDraft(dir, nil, embed, dev)
}

// loadDraft is LoadDraft of the layout f, or of the layout the config names
// when f is nil.
func loadDraft(dir string, f format, embed tensor.Matrix, dev tensor.Device) (*Draft, error) {
	cfgPath := filepath.Join(dir, drafters.ConfigFile)
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("eagle3: loading draft: %w", err)
	}
	var c draftConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("eagle3: %s: %w", cfgPath, err)
	}
	if f == nil {
		f = native{}
		if c.SpeculatorsType != "" {
			f = speculators{}
		}
	}
	geo, err := f.geometry(cfgPath, &c)
	if err != nil {
		return nil, err
	}
	prefix := f.prefix()
	if geo.NumLayers != nil && *geo.NumLayers != 1 {
		return nil, fmt.Errorf("eagle3: %s: num_hidden_layers is %d; drafter runs EAGLE-3 drafts of one decoder layer", cfgPath, *geo.NumLayers)
	}
	ids, err := c.layerIDs(cfgPath)
	if err != nil {
		return nil, err
	}
	if c.NormBeforeRes != nil && *c.NormBeforeRes {
		return nil, fmt.Errorf("eagle3: %s: %s true (the residual is the normed hidden state) is a different architecture than this drafter runs", cfgPath, normBeforeResidualKey)
	}
	norms, err := c.norms(cfgPath)
	if err != nil {
		return nil, err
	}
	g := Geometry{Hidden: geo.Hidden, Heads: geo.Heads, KVHeads: geo.KVHeads, HeadDim: geo.HeadDim, Intermediate: geo.Intermediate,
		RMSNormEps: geo.RMSNormEps, RopeTheta: geo.RopeTheta, MaxPositions: geo.MaxPositions, Vocab: geo.Vocab, DraftVocab: c.DraftVocab,
		Norms: norms}
	if g.HeadDim == 0 && g.Heads > 0 {
		g.HeadDim = g.Hidden / g.Heads
	}
	if g.KVHeads == 0 {
		g.KVHeads = g.Heads
	}
	if len(geo.RopeScaling) > 0 && string(geo.RopeScaling) != "null" {
		var raw map[string]any
		if err := json.Unmarshal(geo.RopeScaling, &raw); err != nil {
			return nil, fmt.Errorf("eagle3: %s: rope_scaling: %w", cfgPath, err)
		}
		num := func(k string) float64 { f, _ := raw[k].(float64); return f }
		typ, _ := raw["rope_type"].(string)
		if typ == "" {
			typ, _ = raw["type"].(string)
		}
		g.RopeScaling = &nn.RopeScaling{Type: typ, Factor: num("factor"), LowFreqFactor: num("low_freq_factor"),
			HighFreqFactor: num("high_freq_factor"), OriginalMaxPositions: int(num("original_max_position_embeddings"))}
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("%w (from %s)", err, cfgPath)
	}
	if c.TargetHidden != 0 && c.TargetHidden != g.Hidden {
		return nil, fmt.Errorf("eagle3: %s: target_hidden_size %d differs from hidden_size %d, which this drafter does not support", cfgPath, c.TargetHidden, g.Hidden)
	}
	if embed.Len() != g.Vocab*g.Hidden {
		return nil, fmt.Errorf("eagle3: %s describes a draft for a target of hidden_size %d and vocab_size %d (%d embedding values), but the target's embedding holds %d values: the draft was made for another model",
			cfgPath, g.Hidden, g.Vocab, g.Vocab*g.Hidden, embed.Len())
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("eagle3: loading draft weights: %w", err)
	}
	defer set.Close()
	file := strings.Join(set.Files(), ", ")
	p := NewParams(g)
	ss := p.Tensors(g)
	names := make(map[string]bool, len(ss)+2)
	for i := range ss {
		ss[i].Name = layerKey(prefix, ss[i].Name)
		names[ss[i].Name] = true
	}
	names["d2t"], names["t2d"] = true, true
	for _, name := range set.Names() {
		if !names[name] {
			return nil, fmt.Errorf("eagle3: %s holds tensor %q, which the draft %s describes does not use: %s", file, name, cfgPath, unusedTensor(name, prefix))
		}
	}
	for _, s := range ss {
		if _, ok := set.Info(s.Name); !ok {
			return nil, fmt.Errorf("eagle3: %s has no tensor %q, which the draft %s describes needs%s", file, s.Name, cfgPath, neededBy(s.Name))
		}
		if err := set.ReadFinite(s.Name, s.Shape, s.Data); err != nil {
			return nil, fmt.Errorf("eagle3: %w", err)
		}
	}
	d2t, shape, err := set.Int64("d2t")
	if err != nil {
		return nil, fmt.Errorf("eagle3: %s: d2t: %w", dir, err)
	}
	if len(shape) != 1 || shape[0] != g.DraftVocab {
		return nil, fmt.Errorf("eagle3: %s: d2t has shape %v, want [%d] (draft_vocab_size in %s)", file, shape, g.DraftVocab, cfgPath)
	}
	voc, err := VocabFromD2T(d2t, g.Vocab)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, file)
	}
	t2d, shape, err := set.Bool("t2d")
	if err != nil {
		return nil, fmt.Errorf("eagle3: %s: t2d: %w", dir, err)
	}
	if len(shape) != 1 || shape[0] != g.Vocab {
		return nil, fmt.Errorf("eagle3: %s: t2d has shape %v, want [%d] (vocab_size in %s)", file, shape, g.Vocab, cfgPath)
	}
	for j, in := range t2d {
		if in != voc.T2D[j] {
			return nil, fmt.Errorf("eagle3: %s: t2d[%d] = %v disagrees with d2t", file, j, in)
		}
	}
	d, err := NewDraft(g, p, voc, embed, dev)
	if err != nil {
		return nil, err
	}
	d.LayerIDs = ids
	d.Freeze()
	return d, nil
}
