package train

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/capture/distill"
	"github.com/drafter-ai/drafter/internal/testutil"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	"github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/drafters/methods"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/train/dataset"
	trainmedusa "github.com/drafter-ai/drafter/train/medusa"
)

// shardPrompts are the prompts the split tests distil.
var shardPrompts = []string{"Once upon a time", "Lily saw a dog", "The sun was hot", "One day", "The little bird", "Max had a red car",
	"It was a cold night", "The cat and the dog", "A boy named Tim", "Mom said", "In the forest"}

// distiller distils the shardPrompts with stories260k: sampled at
// temperature 1 (so the samples of a prompt differ), 2 samples per prompt,
// --batch 1, float32 states. change edits the options of one run.
type distiller struct {
	t       *testing.T
	tg      *target.Target
	prompts string
}

func newDistiller(t *testing.T) *distiller {
	t.Helper()
	tg, err := target.Load(modelDir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	prompts := writePrompts(t, t.TempDir(), shardPrompts)
	return &distiller{t: t, tg: tg, prompts: prompts}
}

func (d *distiller) run(out string, shard, n int, change ...func(*distill.Options)) string {
	d.t.Helper()
	temp, maxNew := 1.0, 20
	opt := distill.Options{Prompts: d.prompts, Out: out, SamplesPerPrompt: 2, Seed: 9, Batch: 1, Shard: shard, NumShards: n,
		Sampling: generate.Overrides{Temperature: &temp, MaxNewTokens: &maxNew}, DType: capture.Float32, ShardRows: 200}
	for _, c := range change {
		c(&opt)
	}
	if _, err := distill.Run(context.Background(), d.tg, opt); err != nil {
		d.t.Fatal(err)
	}
	return out
}

// defaultColumns names the state columns a default distill of d's target
// holds besides final_norm: every method's default layers.
func defaultColumns(t *testing.T, d *distiller) string {
	layers, err := methods.DefaultLayers(d.tg.Config)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(layers))
	for i, k := range layers {
		names[i] = capture.ColumnName(k)
	}
	return strings.Join(names, ", ")
}

// open returns what Run trains on for the --data entries, read for EAGLE-3
// (the default feature layers and final_norm).
func (d *distiller) open(entries ...string) (*trainingData, error) {
	d.t.Helper()
	layers := deagle3.DefaultLayers(d.tg.Config.NumLayers)
	need := Needs{Method: "eagle3", FinalNorm: true, Layers: layers[:]}
	td, err := openData(entries, d.tg.Fingerprint, d.tg.Config.HiddenSize, need, capture.DatasetOptions{}, layers[:])
	if err == nil {
		d.t.Cleanup(func() { td.ds.Close() })
	}
	return td, err
}

// TestShardsTrainAsOne: a prompt set distilled as three --shard i/3 runs into
// one folder each, given to train as their parent folder or as a quoted glob,
// is exactly the training data of one unsharded distill: the same samples in
// the same order, sample ids, tokens, loss masks and every state, bit for bit,
// and a Medusa run trained on either gives the same heads. The distills use
// --batch 1: across different --shard splits distill promises the same tokens
// and states equal to rounding; on the bundled model the bytes are equal too,
// which this test holds it to.
func TestShardsTrainAsOne(t *testing.T) {
	d := newDistiller(t)
	tmp := t.TempDir()
	whole := d.run(filepath.Join(tmp, "whole"), 0, 1)
	parent := filepath.Join(tmp, "split")
	// Named so that lexical order is not shard order.
	for i, name := range []string{"d-2", "d-10", "d-1"} {
		d.run(filepath.Join(parent, name), i, 3)
	}
	os.MkdirAll(filepath.Join(parent, "logs"), 0o755) // no manifest: not a capture
	want, err := d.open(whole)
	if err != nil {
		t.Fatal(err)
	}
	n := want.data.NumSamples()
	if n != 2*len(shardPrompts) {
		t.Fatalf("the unsharded distill holds %d samples", n)
	}
	for _, entries := range [][]string{{parent}, {filepath.Join(parent, "d-*")}, {filepath.Join(parent, "d-1"), filepath.Join(parent, "d-1?"), filepath.Join(parent, "d-2")}} {
		got, err := d.open(entries...)
		if err != nil {
			t.Fatalf("--data %v: %v", entries, err)
		}
		if len(got.folders) != 3 {
			t.Fatalf("--data %v resolved to %v", entries, got.folders)
		}
		if got.data.NumSamples() != n || got.ds.NumTokens() != want.ds.NumTokens() || got.ds.NumResponseTokens() != want.ds.NumResponseTokens() {
			t.Fatalf("--data %v: %d samples, %d rows, %d response rows; unsharded %d, %d, %d", entries, got.data.NumSamples(),
				got.ds.NumTokens(), got.ds.NumResponseTokens(), n, want.ds.NumTokens(), want.ds.NumResponseTokens())
		}
		all := dataset.Final | dataset.Features
		var a, b dataset.Sample
		for i := 0; i < n; i++ {
			if ia, ib := want.ds.SampleID(want.data.index(i)), got.ds.SampleID(got.data.index(i)); ia != ib {
				t.Fatalf("--data %v: training sample %d is sample id %d, unsharded %d", entries, i, ib, ia)
			}
			if err := want.data.Sample(i, &a, all); err != nil {
				t.Fatal(err)
			}
			if err := got.data.Sample(i, &b, all); err != nil {
				t.Fatal(err)
			}
			same := slices.Equal(a.Tokens, b.Tokens) && slices.Equal(a.LossMask, b.LossMask) && bitsEqual(a.Final, b.Final)
			for c := range a.Features {
				same = same && bitsEqual(a.Features[c], b.Features[c])
			}
			if !same {
				t.Fatalf("--data %v: training sample %d (id %d) differs from the unsharded distill's", entries, i, want.ds.SampleID(want.data.index(i)))
			}
		}
	}

	train := func(name string, data ...string) *medusa.Heads {
		t.Helper()
		res, err := Run(context.Background(), Options{Method: smallMedusa(), Model: modelDir, Data: data, Out: filepath.Join(tmp, name)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res.Trainer.(*trainmedusa.Result).Heads
	}
	hw, hs := train("train-whole", whole), train("train-split", filepath.Join(parent, "d-*"))
	for h := range hw.W {
		for k := range hw.W[h] {
			if !bitsEqual(hw.W[h][k], hs.W[h][k]) || !bitsEqual(hw.B[h][k], hs.B[h][k]) {
				t.Fatalf("Medusa head %d block %d differs between the unsharded and the split data", h, k)
			}
		}
		if !bitsEqual(hw.LMHead[h], hs.LMHead[h]) {
			t.Fatalf("Medusa head %d output layer differs between the unsharded and the split data", h)
		}
	}
	prov := readProv(t, filepath.Join(tmp, "train-split", ProvenanceFile))
	if got := fmt.Sprint(prov["args"].(map[string]any)["data"]); got != fmt.Sprint([]string{filepath.Join(parent, "d-1"), filepath.Join(parent, "d-10"), filepath.Join(parent, "d-2")}) {
		t.Errorf("drafter.json records the data %s, want the three folders the glob matched", got)
	}
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// TestShardsMustFit: the shards of a split that do not make one dataset are
// refused before any shard is read, naming the folders and what differs: a
// missing shard, a shard given twice, a shard made with other settings or
// split another way, shards next to the unsharded run of the same distill,
// and captures stored differently.
func TestShardsMustFit(t *testing.T) {
	d := newDistiller(t)
	tmp := t.TempDir()
	s := []string{d.run(filepath.Join(tmp, "s0"), 0, 3), d.run(filepath.Join(tmp, "s1"), 1, 3), d.run(filepath.Join(tmp, "s2"), 2, 3)}
	whole := d.run(filepath.Join(tmp, "whole"), 0, 1)
	copyDir := func(from, to string) string {
		t.Helper()
		if err := os.MkdirAll(to, 0o755); err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(from)
		for _, e := range entries {
			testutil.CopyFile(t, filepath.Join(from, e.Name()), filepath.Join(to, e.Name()))
		}
		return to
	}
	rebatched := d.run(filepath.Join(tmp, "s1-batch4"), 1, 3, func(o *distill.Options) { o.Batch, o.ShardRows = 4, 0 })
	cases := []struct {
		name string
		data []string
		want string
	}{
		{"a missing shard", []string{s[0], s[2]}, fmt.Sprintf("train: --data holds shards 0/3 (%s), 2/3 (%s) of one distill but not --shard 1/3: training on part of the split would leave those prompts out", s[0], s[2])},
		{"a shard twice", []string{s[0], s[1], s[2], copyDir(s[1], filepath.Join(tmp, "s1-copy"))}, "identical manifests"},
		{"a shard twice, distilled twice", []string{s[0], s[1], s[2], rebatched}, fmt.Sprintf("train: --data %s and %s both hold --shard 1/3 of one distill: its samples would be trained on twice", s[1], rebatched)},
		{"another seed", []string{s[0], d.run(filepath.Join(tmp, "s1-seed"), 1, 3, func(o *distill.Options) { o.Seed = 10 }), s[2]},
			fmt.Sprintf("train: --data %s and %s are shards of one distill of the same prompt file (--shard 0/3 and 1/3) but record different seed (\"10\" and \"9\")", filepath.Join(tmp, "s1-seed"), s[0])},
		{"split another way", []string{s[0], s[1], s[2], d.run(filepath.Join(tmp, "h1"), 1, 2)},
			fmt.Sprintf("train: --data %s is --shard 1/2 of a distill of the same prompt file as %s, which is --shard 0/3", filepath.Join(tmp, "h1"), s[0])},
		{"shards and the whole", []string{whole, s[0], s[1], s[2]}, fmt.Sprintf("train: --data %s and %s both hold sample 0 of one distill (the same prompt file and settings): it would be trained on twice", whole, s[0])},
		{"stored as float16", []string{s[0], s[1], d.run(filepath.Join(tmp, "s2-f16"), 2, 3, func(o *distill.Options) { o.DType = capture.Float16 })},
			fmt.Sprintf("train: --data %s stores its states as float16, but %s as float32: captures trained together must be stored alike", filepath.Join(tmp, "s2-f16"), s[0])},
		{"other layers", []string{s[0], s[1], d.run(filepath.Join(tmp, "s2-layers"), 2, 3, func(o *distill.Options) { o.Layers = []int{1, 2, 3, 4, 5} })},
			fmt.Sprintf("train: --data %s holds the states hidden_1, hidden_2, hidden_3, hidden_4, hidden_5, final_norm, but %s holds %s, final_norm", filepath.Join(tmp, "s2-layers"), s[0], defaultColumns(t, d))},
	}
	for _, c := range cases {
		_, err := d.open(c.data...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant an error with %q", c.name, err, c.want)
		}
	}
	// The rebatched shard stands in for the first run's: --batch may differ.
	if _, err := d.open(s[0], rebatched, s[2]); err != nil {
		t.Errorf("shards distilled with different --batch: %v", err)
	}
	// Two distills of one prompt file with different seeds are two datasets,
	// as before: their sample ids are not the same samples.
	if _, err := d.open(whole, d.run(filepath.Join(tmp, "whole-seed"), 0, 1, func(o *distill.Options) { o.Seed = 10 })); err != nil {
		t.Errorf("two unsharded distills with different seeds: %v", err)
	}
}

// TestExpandData: what each form of --data entry resolves to, and the
// entries that name nothing to train on.
func TestExpandData(t *testing.T) {
	tmp := t.TempDir()
	mk := func(dir string, manifest bool) string {
		t.Helper()
		p := filepath.Join(tmp, dir)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if manifest {
			if err := os.WriteFile(filepath.Join(p, capture.ManifestName), []byte("{}"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	a0, a1, a2 := mk("runs/a-0", true), mk("runs/a-1", true), mk("runs/a-2", true)
	mk("runs/logs", false)
	one := mk("one", true)
	mk("empty/sub", false)
	mk("mixed/b-0", true)
	mk("mixed/b-1", false)
	p := func(s string) string { return filepath.Join(tmp, s) }
	for _, c := range []struct {
		entries []string
		want    []string
		err     string
	}{
		{[]string{one}, []string{one}, ""},
		{[]string{p("runs")}, []string{a0, a1, a2}, ""},
		{[]string{p("runs/a-*")}, []string{a0, a1, a2}, ""},
		{[]string{p("runs/a-[02]"), one}, []string{a0, a2, one}, ""},
		{[]string{p("runs/nothing-*")}, nil, "train: --data " + p("runs/nothing-*") + " matches nothing"},
		{[]string{p("runs/*")}, nil, "matches " + p("runs/logs") + ", which holds no manifest.json: not a capture folder"},
		{[]string{p("mixed/b-*")}, nil, "matches " + p("mixed/b-1") + ", which holds no manifest.json"},
		{[]string{p("empty")}, nil, "train: --data " + p("empty") + " holds no manifest.json, and none of its subfolders does"},
		{[]string{p("missing")}, nil, "train: --data " + p("missing") + " is not a capture directory"},
		{[]string{p("runs"), a1}, nil, "train: --data " + a1 + " names the capture " + a1 + ", which " + p("runs") + " names too"},
		{[]string{p("runs/a-*"), p("runs")}, nil, "which " + p("runs/a-*") + " names too"},
	} {
		got, err := ExpandData(c.entries)
		if c.err == "" && (err != nil || !slices.Equal(got, c.want)) {
			t.Errorf("ExpandData(%v) = %v, %v; want %v", c.entries, got, err, c.want)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("ExpandData(%v): %v; want an error with %q", c.entries, err, c.err)
		}
	}
}
