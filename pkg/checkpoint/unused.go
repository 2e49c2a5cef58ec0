package checkpoint

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/drafter-ai/drafter/pkg/arch"
	"github.com/drafter-ai/drafter/pkg/safetensors"
)

// checkUnused refuses tensors of w that the model of family fam described by cfg
// (whose tensors are specs) would not use. Two kinds are allowed:
//
//   - the family's computed buffers (arch.Family.Buffers: the rotary inverse
//     frequencies older Transformers saved);
//   - the tensors of the ExtraLayers layers after num_hidden_layers that the
//     config says the checkpoint holds and inference does not run (DeepSeek's
//     multi-token-prediction layers, num_nextn_predict_layers), as
//     Transformers ignores them;
//   - lm_head.weight in a model with tied embeddings, when its dtype, shape and bytes
//     equal model.embed_tokens.weight's (some exporters write the tied matrix twice).
//     If it differs, the file holds an output layer the model would not compute with.
func checkUnused(cfg *Config, fam arch.Family, w *safetensors.Set, specs []arch.Tensor) error {
	used := make(map[string]bool, len(specs))
	for _, t := range specs {
		used[t.Name] = true
	}
	var extra []string
	for _, name := range w.Names() {
		switch {
		case used[name], fam.IsBuffer(name), extraLayer(cfg, name):
		case name == arch.LMHeadName && cfg.TieWordEmbeddings:
			if err := checkTiedHead(cfg, w); err != nil {
				return err
			}
		default:
			extra = append(extra, name)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	return unusedError(cfg, w, extra)
}

// extraLayer reports whether name belongs to one of the layers past
// num_hidden_layers that cfg says are not run (Config.ExtraLayers).
func extraLayer(cfg *Config, name string) bool {
	l, _, ok := arch.LayerOf(name)
	return ok && l >= cfg.NumLayers && l < cfg.NumLayers+cfg.ExtraLayers
}

// checkTiedHead refuses an lm_head.weight that differs from the embedding it is tied to.
func checkTiedHead(cfg *Config, w *safetensors.Set) error {
	head, hi, err := w.Raw(arch.LMHeadName)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	emb, ei, err := w.Raw(arch.EmbedName)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	var differ string
	switch {
	case hi.DType != ei.DType || !slices.Equal(hi.Shape, ei.Shape):
		differ = fmt.Sprintf("%s %s against %s %s", hi.DType, safetensors.ShapeString(hi.Shape), ei.DType, safetensors.ShapeString(ei.Shape))
	case !bytes.Equal(head, emb):
		differ = "same dtype and shape, different values"
	default:
		return nil
	}
	return fmt.Errorf("checkpoint: %s holds %s, but %s has tie_word_embeddings true, so the model computes its output with %s, and the two differ (%s); "+
		"set tie_word_embeddings to false if the file's lm_head is the model's output layer, or remove it",
		hi.File, arch.LMHeadName, cfg.Path, arch.EmbedName, differ)
}

// maxListed caps the tensor groups an error lists.
const maxListed = 8

// unusedError describes the tensors of w that cfg does not use, compactly: the tensors
// of layers beyond num_hidden_layers by layer, the others by name, those repeated in
// several layers once with the layer count.
func unusedError(cfg *Config, w *safetensors.Set, extra []string) error {
	var beyond []int              // layers past num_hidden_layers, sorted
	perLayer := map[int]int{}     // tensors per such layer
	bySuffix := map[string]int{}  // in-range layer tensors by their name after the layer
	var others, suffixes []string // tensors outside layers; suffixes in first-seen order
	files := map[string]bool{}
	for _, name := range extra {
		in, _ := w.Info(name)
		files[in.File] = true
		layer, rest, ok := arch.LayerOf(name)
		switch {
		case ok && layer >= cfg.NumLayers:
			if perLayer[layer] == 0 {
				beyond = append(beyond, layer)
			}
			perLayer[layer]++
		case ok:
			if bySuffix[rest] == 0 {
				suffixes = append(suffixes, rest)
			}
			bySuffix[rest]++
		default:
			others = append(others, name)
		}
	}
	in := strings.Join(sortedKeys(files), ", ")
	var parts []string
	if len(beyond) > 0 {
		sort.Ints(beyond)
		n := 0
		for _, l := range beyond {
			n += perLayer[l]
		}
		parts = append(parts, fmt.Sprintf("%s (%s) %s in %s but %s has num_hidden_layers %d, so a %d-layer model would run without them",
			layerRange(beyond), count(n), are(n), in, cfg.Path, cfg.NumLayers, cfg.NumLayers))
	}
	var listed []string
	for _, s := range suffixes {
		if n := bySuffix[s]; n > 1 {
			listed = append(listed, fmt.Sprintf("%s (%d layers)", arch.LayerPattern(-1, s), n))
		} else {
			for _, name := range extra {
				if _, rest, ok := arch.LayerOf(name); ok && rest == s {
					listed = append(listed, name)
				}
			}
		}
	}
	listed = append(listed, others...)
	if len(listed) > 0 {
		n := len(extra)
		for _, l := range beyond {
			n -= perLayer[l]
		}
		more := ""
		if len(listed) > maxListed {
			more = fmt.Sprintf(" and %d more", len(listed)-maxListed)
			listed = listed[:maxListed]
		}
		parts = append(parts, fmt.Sprintf("%s%s %s in %s, which the model %s describes (%s with %s) does not use",
			strings.Join(listed, ", "), more, are(n), in, cfg.Path, cfg.ModelType, describeOptions(cfg)))
	}
	return fmt.Errorf("checkpoint: %s; the weights and config.json must describe the same model", strings.Join(parts, "; "))
}

// layerRange names sorted layers: "model.layers.4.*", "model.layers.4.* to
// model.layers.7.*" when contiguous, else a list.
func layerRange(layers []int) string {
	name := func(l int) string { return arch.LayerPattern(l, "*") }
	if len(layers) == 1 {
		return name(layers[0])
	}
	if layers[len(layers)-1]-layers[0] == len(layers)-1 {
		return name(layers[0]) + " to " + name(layers[len(layers)-1])
	}
	s := make([]string, len(layers))
	for i, l := range layers {
		s[i] = name(l)
	}
	return strings.Join(s, ", ")
}

func are(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func count(n int) string {
	if n == 1 {
		return "1 tensor"
	}
	return fmt.Sprintf("%d tensors", n)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, filepath.Clean(k))
	}
	sort.Strings(out)
	return out
}
