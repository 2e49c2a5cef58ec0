package capture

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// crossCheck compares the fields a manifest records twice: drafter distill
// and capture record their settings both as fields (model_fingerprint,
// hashes, seed, layers, dtype, the generation block) and in args, the
// strings a resume compares. A manifest that lost its checksum, or predates
// it, still has these pairs: two that disagree mean one was damaged or
// edited, and which one is right cannot be told. A value recorded once (a
// manifest from another writer, args without the key) is not compared.
func (m *Manifest) crossCheck() error {
	a := m.Args
	pairs := []struct{ field, value string }{
		{"model_fingerprint", m.ModelFingerprint},
		{"tokenizer_hash", m.TokenizerHash},
		{"chat_template_hash", m.ChatTemplateHash},
		{"prompt_file_hash", m.PromptFileHash},
		{"dtype", string(m.DType)},
	}
	for _, p := range pairs {
		if v, ok := a[p.field]; ok && v != p.value {
			return mismatch(p.field, p.value, "args."+p.field, v)
		}
	}
	if v, ok := a["seed"]; ok && v != strconv.FormatUint(uint64(m.Seed), 10) && v != strconv.FormatInt(m.Seed, 10) {
		return mismatch("seed", m.Seed, "args.seed", v)
	}
	if v, ok := a["layers"]; ok && !slices.Equal(intsIn(v), m.Layers) {
		return mismatch("layers", m.Layers, "args.layers", v)
	}
	g, _ := m.Generation.(map[string]any)
	if g == nil {
		return nil
	}
	// distill's args.sampling is "temperature=T top_p=P top_k=K min_p=M".
	for _, kv := range strings.Fields(a["sampling"]) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if err := sameNumber("generation."+k, g[k], "args.sampling "+k, v); err != nil {
			return err
		}
	}
	for _, k := range []string{"max_new_tokens", "max_length", "samples_per_prompt"} {
		if v, ok := a[k]; ok {
			if err := sameNumber("generation."+k, g[k], "args."+k, v); err != nil {
				return err
			}
		}
	}
	// The generator block (drafter distill --generator) and its args.
	if gen, ok := g["generator"].(map[string]any); ok {
		for _, p := range [][2]string{{"api", "generator_api"}, {"token_id_source", "generator_token_ids"}, {"served_model", "generator_served_model"}} {
			rec, isStr := gen[p[0]].(string)
			if v, ok := a[p[1]]; ok && isStr && rec != v {
				return mismatch("generation.generator."+p[0], rec, "args."+p[1], v)
			}
		}
	}
	return nil
}

// sameNumber compares a number of the generation block (as decoded JSON)
// with its args spelling; a field the block lacks is not compared.
func sameNumber(field string, rec any, argName, arg string) error {
	f, ok := rec.(float64)
	if !ok {
		return nil
	}
	v, err := strconv.ParseFloat(arg, 64)
	if err != nil || v != f {
		return mismatch(field, f, argName, arg)
	}
	return nil
}

func mismatch(field string, rec any, argName string, arg string) error {
	return fmt.Errorf("%s is %v, but %s is %q: the fields recorded twice disagree", field, rec, argName, arg)
}

var intRe = regexp.MustCompile(`-?[0-9]+`)

// intsIn returns the integers written in s ("[1 3 5]", "1,3,5").
func intsIn(s string) []int {
	var out []int
	for _, f := range intRe.FindAllString(s, -1) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil
		}
		out = append(out, n)
	}
	return out
}
