package capture

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testutil"
)

// sampledManifest is testManifest as drafter distill records a sampled run:
// the sampling settings in the generation block and again in args.
func sampledManifest() Manifest {
	m := testManifest(testLayout)
	m.Generation = map[string]any{"temperature": 0.7, "top_p": 0.9, "top_k": 0, "min_p": 0, "max_new_tokens": 64}
	m.Args["sampling"] = "temperature=0.7 top_p=0.9 top_k=0 min_p=0"
	m.Args["max_new_tokens"] = "64"
	m.Args["model_fingerprint"] = m.ModelFingerprint
	return m
}

func writeSampled(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	w, err := Create(dir, sampledManifest(), ShardOptions{MaxRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range idRange(0, 4) {
		if err := w.Write(makeSample(id, sampleLen(id), testLayout)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestManifestChecksum: manifest.json records its own SHA-256, and one
// flipped bit (temperature 0.7 becomes 0.6: '7' is 0x37, '6' 0x36) is
// refused naming the file, where it used to change the settings silently.
func TestManifestChecksum(t *testing.T) {
	dir := writeSampled(t)
	path := filepath.Join(dir, ManifestName)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(raw, &rec); err != nil || rec["sha256"] == nil {
		t.Fatalf("manifest.json records no sha256 (%v):\n%s", err, raw)
	}
	if _, err := ReadManifest(dir); err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(raw, []byte(`"temperature": 0.7`))
	if i < 0 {
		t.Fatalf("no temperature in\n%s", raw)
	}
	bad := bytes.Clone(raw)
	bad[i+len(`"temperature": 0.`)] ^= 1
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{"ReadManifest": func() error { _, err := ReadManifest(dir); return err }(), "Verify": Verify(dir)} {
		if err == nil || !strings.Contains(err.Error(), path+" is damaged") || !strings.Contains(err.Error(), "SHA-256") {
			t.Errorf("%s of a manifest with a flipped bit: %v, want it refused as damaged, naming %s", what, err, path)
		}
	}
	// The same bytes re-indented are the same manifest: the sum covers the
	// values, not the layout of the text.
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, raw, "", "\t"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadManifest(dir); err != nil {
		t.Fatalf("re-indented manifest: %v", err)
	}
}

// TestManifestWithoutChecksumIsCrossChecked: a manifest from before
// checksums is read, but the fields it records twice must agree: a changed
// temperature, fingerprint, seed, layer list or bytes_per_token is refused
// naming both fields.
func TestManifestWithoutChecksumIsCrossChecked(t *testing.T) {
	dir := writeSampled(t)
	path := filepath.Join(dir, ManifestName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	testutil.EditJSON(t, path, func(m map[string]any) { delete(m, "sha256") })
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatalf("manifest without a checksum: %v", err)
	}
	if m.Checksummed() {
		t.Error("a manifest without a checksum reads as checksummed")
	}
	for _, c := range []struct {
		name string
		edit func(m map[string]any)
		want []string
	}{
		{"temperature", func(m map[string]any) { m["generation"].(map[string]any)["temperature"] = 1.0 },
			[]string{"generation.temperature is 1", `args.sampling temperature is "0.7"`}},
		{"fingerprint", func(m map[string]any) { m["model_fingerprint"] = "sha256:model-b" },
			[]string{"model_fingerprint is sha256:model-b", `args.model_fingerprint is "sha256:model-a"`}},
		{"seed", func(m map[string]any) { m["seed"] = 43 }, []string{"seed is 43", `args.seed is "42"`}},
		{"layers", func(m map[string]any) { m["args"].(map[string]any)["layers"] = "0,2,4" }, []string{"layers is [0 2 3]", `args.layers is "0,2,4"`}},
		{"max_new_tokens", func(m map[string]any) { m["generation"].(map[string]any)["max_new_tokens"] = 65 }, []string{"generation.max_new_tokens is 65"}},
		{"bytes_per_token", func(m map[string]any) { m["bytes_per_token"] = 1.5 }, []string{"bytes_per_token 1.5 does not match"}},
		{"served model", func(m map[string]any) {
			m["generation"].(map[string]any)["generator"] = map[string]any{"api": "openai", "served_model": "model-b"}
			m["args"].(map[string]any)["generator_api"] = "openai"
			m["args"].(map[string]any)["generator_served_model"] = "model-a"
		}, []string{"generation.generator.served_model is model-b", `args.generator_served_model is "model-a"`}},
	} {
		if err := os.WriteFile(path, good, 0o644); err != nil {
			t.Fatal(err)
		}
		testutil.EditJSON(t, path, func(m map[string]any) { delete(m, "sha256"); c.edit(m) })
		_, err := ReadManifest(dir)
		if err == nil {
			t.Errorf("%s changed: accepted", c.name)
			continue
		}
		for _, w := range append(c.want, path) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s changed: %v\nwant it to mention %q", c.name, err, w)
			}
		}
	}
}

// TestResumeSealsOlderManifest: resuming a capture whose manifest predates
// checksums writes it back with one.
func TestResumeSealsOlderManifest(t *testing.T) {
	dir := writeSampled(t)
	path := filepath.Join(dir, ManifestName)
	testutil.EditJSON(t, path, func(m map[string]any) { delete(m, "sha256") })
	rs, err := OpenForResume(dir, sampledManifest().Args)
	if err != nil {
		t.Fatal(err)
	}
	w, err := rs.Writer(ShardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(dir)
	if err != nil || !m.Checksummed() {
		t.Fatalf("resumed manifest: checksummed %v, %v", err == nil && m.Checksummed(), err)
	}
}
