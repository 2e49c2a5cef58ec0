package bench

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
)

// A shape is a model geometry drafter bench builds with random weights: its
// config.json, field for field as the published checkpoint's (the 60M bench
// model is ours: pkg/model.Bench60MConfig), so that a random model of it
// computes exactly what the real model's forward pass computes, on other
// values.
type shape struct {
	// about says what the shape is, for the list of shapes.
	about string
	// config is its config.json.
	config map[string]any
}

// llama3RopeScaling is Llama 3.1's and 3.2's rope_scaling with factor f.
func llama3RopeScaling(f float64) map[string]any {
	return map[string]any{"rope_type": "llama3", "factor": f, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
		"original_max_position_embeddings": 8192}
}

// llama returns a LlamaForCausalLM config.json with the keys every shape
// shares and the given geometry.
func llama(hidden, inter, layers, heads, kvHeads, headDim, vocab, maxPos int, theta float64, tied bool, bos, eos int, rope map[string]any) map[string]any {
	c := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
		"hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
		"num_attention_heads": heads, "num_key_value_heads": kvHeads, "head_dim": headDim,
		"hidden_act": "silu", "max_position_embeddings": maxPos, "rms_norm_eps": 1e-5,
		"rope_theta": theta, "rope_scaling": nil, "attention_bias": false, "mlp_bias": false,
		"vocab_size": vocab, "bos_token_id": bos, "eos_token_id": eos, "tie_word_embeddings": tied,
		"torch_dtype": "bfloat16",
	}
	if rope != nil {
		c["rope_scaling"] = rope
	}
	return c
}

// shapes are the named shapes. The Llama geometries are those of
// meta-llama/Llama-3.2-1B and meta-llama/Llama-3.1-8B's config.json
// (1,235,814,400 and 8,030,261,248 parameters; TestShapeParams).
var shapes = map[string]shape{
	"60m": {"the 60M bench model of pkg/model (hidden 512, 8 layers, vocab 32000, untied; about 58M parameters)",
		llama(512, 1536, 8, 8, 4, 64, 32000, 2048, 10000, false, 1, 2, nil)},
	"llama3-1b": {"Llama-3.2-1B (hidden 2048, 16 layers, 32 heads, 8 KV heads, vocab 128256, tied; 1.24B parameters)",
		llama(2048, 8192, 16, 32, 8, 64, 128256, 131072, 500000, true, 128000, 128001, llama3RopeScaling(32))},
	"llama3-8b": {"Llama-3.1-8B (hidden 4096, 32 layers, 32 heads, 8 KV heads, vocab 128256, untied; 8.03B parameters)",
		llama(4096, 14336, 32, 32, 8, 128, 128256, 131072, 500000, false, 128000, 128001, llama3RopeScaling(8))},
}

// Shapes returns the shape names drafter bench --random takes, sorted.
func Shapes() []string {
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ShapeList is the shapes with what each is, one a line, for help texts and
// the error naming an unknown shape.
func ShapeList() string {
	var b strings.Builder
	for _, n := range Shapes() {
		fmt.Fprintf(&b, "  %-10s %s\n", n, shapes[n].about)
	}
	return b.String()
}

// UnknownShapeError is a shape name drafter bench does not know.
type UnknownShapeError struct{ Name string }

// Error names the shape and lists the known ones.
func (e *UnknownShapeError) Error() string {
	return fmt.Sprintf("unknown shape %q; the shapes are %s", e.Name, strings.Join(Shapes(), ", "))
}

// ShapeConfig returns the config.json of shape name and its parsed
// configuration (pkg/checkpoint parses it as it would the file); layers > 0
// replaces num_hidden_layers (drafter bench --layers, an override that
// keeps every other dimension of the shape).
func ShapeConfig(name string, layers int) (*checkpoint.Config, []byte, error) {
	s, ok := shapes[name]
	if !ok {
		return nil, nil, &UnknownShapeError{name}
	}
	c := make(map[string]any, len(s.config))
	for k, v := range s.config {
		c[k] = v
	}
	if layers < 0 {
		return nil, nil, fmt.Errorf("bench: %d layers: want a positive number (or 0, the shape's own)", layers)
	}
	if layers > 0 {
		c["num_hidden_layers"] = layers
	}
	raw, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: encoding shape %s's config: %w", name, err)
	}
	raw = append(raw, '\n')
	cfg, err := checkpoint.ParseConfig("shape "+name+" config.json", raw)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	return cfg, raw, nil
}
