// Package bench measures drafter's whole pipeline on a model of a named
// shape (Llama-3.2-1B, Llama-3.1-8B, the 60M bench model) built with random
// weights in memory on the run's device, so that a GPU is measured without
// carrying checkpoints: prefill and decode at batch 1 and 32, distillation
// through the generation engine with capture taps, the Medusa and EAGLE-3
// trainers' steps, and eval's step costs in decode steps of the target
// (drafter bench --random). It also writes such a model as a checkpoint
// (Save) for the pipeline's commands to load.
//
// Everything measured is the code the stages run: model.Forward, the
// generation engine distill drives, the trainers' own steps and the loop's
// optimiser update (train/medusa.StepRate, train/eagle3.StepRate), the
// EAGLE-3 draft session and the Medusa scorer eval's proposers draft with.
package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"github.com/drafter-ai/drafter/capture/distill"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/medusa"
)

// Batch sizes of the table's rows: decode at batch 32 steps 32 sequences
// together through one model.Forward; distillation runs 64 sequences, as
// drafter distill --batch 64 does.
const (
	DecodeBatch  = 32
	DistillBatch = 64
	// TreeNodes is the verified tree's size: EAGLE's total_token default
	// (spec.DefaultDynamicParams), the root and 59 drafted nodes.
	TreeNodes = 60
	// ChainDepth is the verified chain's drafted tokens (5 rows with the
	// root).
	ChainDepth = 4
)

// Options are what drafter bench --random measures.
type Options struct {
	// Shape names the geometry (Shapes); Layers > 0 overrides its number of
	// decoder layers (every other dimension stays the shape's).
	Shape  string
	Layers int
	// DType is the weights' dtype (tensor.BF16 by default, as the published
	// checkpoints are), Seed the random weights' seed.
	DType tensor.DType
	Seed  uint64
	// Prompt is the prefill length, Decode the timed decode steps after it
	// (batch 1 and DecodeBatch), Iters the repetitions of the prefills and
	// of each step cost (the best is kept).
	Prompt, Decode, Iters int
	// DistillPrompt and DistillTokens are each distilled sequence's prompt
	// length and generated tokens.
	DistillPrompt, DistillTokens int
	// TrainTokens is the tokens of one training step (each method's batch,
	// one random sample of that length), TrainSteps the timed steps after
	// one untimed one.
	TrainTokens, TrainSteps int
	// MedusaSharedLMHead trains and drafts with heads that share the
	// target's lm_head (drafter train medusa --shared-lm-head) instead of
	// the default one lm_head copy per head, whose training state is four
	// copies of V×H values per head.
	MedusaSharedLMHead bool
	// Device runs everything (nil: the CPU device).
	Device tensor.Device
	// Log, when set, receives a line as each part starts.
	Log io.Writer

	// freeHost reports the host's available memory (nil: MemAvailable of
	// /proc/meminfo); tests replace it.
	freeHost func() (int64, error)
}

// Quick returns the smallest sizes that still measure every row: a short
// prompt, few steps, one repetition (the 1B shape on two CPU cores).
func Quick() Options {
	return Options{DType: tensor.BF16, Seed: 1, Prompt: 32, Decode: 4, Iters: 1,
		DistillPrompt: 8, DistillTokens: 4, TrainTokens: 32, TrainSteps: 1}
}

// Defaults returns the sizes meant for a GPU: a 512-token prefill, 32
// decode steps, the best of 3.
func Defaults() Options {
	return Options{DType: tensor.BF16, Seed: 1, Prompt: 512, Decode: 32, Iters: 3,
		DistillPrompt: 128, DistillTokens: 64, TrainTokens: 512, TrainSteps: 5}
}

// Row is one measurement of the table.
type Row struct {
	// Name says what was measured; Value is in Unit.
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Detail says how (sizes, what the time covers).
	Detail string `json:"detail"`
}

// Table is drafter bench --random's result.
type Table struct {
	Shape string `json:"shape"`
	// Layers is the decoder layers built, ShapeLayers the shape's own.
	Layers      int    `json:"layers"`
	ShapeLayers int    `json:"shape_layers"`
	Params      int64  `json:"params"`
	DType       string `json:"dtype"`
	Device      string `json:"device"`
	Rows        []Row  `json:"rows"`
}

// The row names, in table order.
const (
	RowPrefill1     = "prefill, batch 1"
	RowPrefill32    = "prefill, batch 32"
	RowDecode1      = "decode, batch 1"
	RowDecode32     = "decode, batch 32"
	RowDistill      = "distill, batch 64"
	RowTrainMedusa  = "train medusa"
	RowTrainEAGLE3  = "train eagle3"
	RowVerifyChain  = "verify chain-4 (5 rows)"
	RowVerifyTree   = "verify tree (60 nodes)"
	RowDraftEAGLE3  = "draft step eagle3"
	RowDraftMedusa  = "draft step medusa"
	unitTokens      = "tokens/s"
	unitDecodeSteps = "decode steps"
)

// RowNames lists every row of a table, in order.
func RowNames() []string {
	return []string{RowPrefill1, RowPrefill32, RowDecode1, RowDecode32, RowDistill, RowTrainMedusa, RowTrainEAGLE3,
		RowVerifyChain, RowVerifyTree, RowDraftEAGLE3, RowDraftMedusa, RowCopy, RowProducts, RowDecodeRoof, RowPrefillRoof}
}

// SizeError is an option out of range: Field names it (the flag's name
// without dashes).
type SizeError struct {
	Field string
	Msg   string
}

func (e *SizeError) Error() string { return e.Field + ": " + e.Msg }

// check refuses sizes that cannot be measured.
func (o *Options) check(cfg *checkpoint.Config) error {
	pos := func(field string, v int) error {
		if v < 1 {
			return &SizeError{field, fmt.Sprintf("%d: want at least 1", v)}
		}
		return nil
	}
	for _, c := range []struct {
		f string
		v int
	}{{"prompt", o.Prompt}, {"decode", o.Decode}, {"iters", o.Iters}, {"distill-prompt", o.DistillPrompt},
		{"distill-tokens", o.DistillTokens}, {"train-steps", o.TrainSteps}} {
		if err := pos(c.f, c.v); err != nil {
			return err
		}
	}
	if cfg.NumLayers < 3 {
		return &SizeError{"layers", fmt.Sprintf("%d: want at least 3 (EAGLE-3 fuses three distinct layers)", cfg.NumLayers)}
	}
	if o.TrainTokens < 8 {
		return &SizeError{"train-tokens", fmt.Sprintf("%d: want at least 8 (a sample long enough for every Medusa head and EAGLE-3 step)", o.TrainTokens)}
	}
	if n := o.Prompt + o.Decode + TreeNodes; n > cfg.MaxPositions {
		return &SizeError{"prompt", fmt.Sprintf("%d tokens with %d decode steps and a %d-node tree exceed the shape's %d positions", o.Prompt, o.Decode, TreeNodes, cfg.MaxPositions)}
	}
	if n := o.DistillPrompt + o.DistillTokens; n > cfg.MaxPositions {
		return &SizeError{"distill-prompt", fmt.Sprintf("%d tokens with %d generated exceed the shape's %d positions", o.DistillPrompt, o.DistillTokens, cfg.MaxPositions)}
	}
	switch o.DType {
	case tensor.BF16, tensor.F16, tensor.F32:
	default:
		return &SizeError{"dtype", fmt.Sprintf("%s: want bf16, f16 or f32", o.DType)}
	}
	return nil
}

// Run builds the random model o names on o.Device and measures the table.
// It checks first that the model and the trainers fit the host's and the
// device's free memory, and refuses with the sizes when they do not.
func Run(ctx context.Context, o Options) (*Table, error) {
	cfg, _, err := ShapeConfig(o.Shape, o.Layers)
	if err != nil {
		return nil, err
	}
	if err := o.check(cfg); err != nil {
		return nil, err
	}
	shapeCfg, _, _ := ShapeConfig(o.Shape, 0)
	dev := o.Device
	if err := checkMemory(cfg, &o); err != nil {
		return nil, err
	}
	tb := &Table{Shape: o.Shape, Layers: cfg.NumLayers, ShapeLayers: shapeCfg.NumLayers, Params: cfg.NumParams(),
		DType: o.DType.String(), Device: "cpu"}
	if dev != nil {
		tb.Device = deviceName(dev)
	}
	r := &runner{o: &o, cfg: cfg, tb: tb}
	o.logf("bench: building a random %s model (%d layers, %s, %.2fB parameters) on %s", o.Shape, cfg.NumLayers, o.DType, float64(tb.Params)/1e9, tb.Device)
	m, err := model.NewRandomAs(cfg, o.Seed, o.DType, dev)
	if err != nil {
		return nil, fmt.Errorf("bench: building the random model: %w", err)
	}
	r.m = m
	err = r.forwardRows(ctx)
	if err == nil {
		err = r.stepCosts(ctx)
	}
	if err == nil {
		err = r.ceilingRows(ctx)
	}
	if cerr := m.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("bench: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	// The trainers after the model is gone: they hold their own copies of
	// the output layers.
	if err := r.trainRows(ctx); err != nil {
		return nil, err
	}
	tb.order()
	for _, row := range tb.Rows {
		if !(row.Value > 0) || math.IsInf(row.Value, 0) {
			return nil, fmt.Errorf("bench: %s measured %v %s: the clock or the run is broken", row.Name, row.Value, row.Unit)
		}
	}
	return tb, nil
}

// deviceName names dev as drafter devices does, where it says.
func deviceName(dev tensor.Device) string {
	if n, ok := dev.(interface{ Name() string }); ok {
		return n.Name()
	}
	return "cpu"
}

func (o *Options) logf(format string, a ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", a...)
	}
}

// order sorts the rows as RowNames lists them.
func (t *Table) order() {
	var out []Row
	for _, n := range RowNames() {
		for _, r := range t.Rows {
			if r.Name == n {
				out = append(out, r)
			}
		}
	}
	t.Rows = out
}

// runner holds one run's model and its measurements so far.
type runner struct {
	o   *Options
	cfg *checkpoint.Config
	tb  *Table
	m   *model.Model
	// step is one batch-1 decode step's time, the unit of the step costs.
	step float64
}

func (r *runner) add(name string, value float64, unit, detail string) {
	r.tb.Rows = append(r.tb.Rows, Row{name, value, unit, detail})
}

// tokens returns n deterministic token ids of stream s, below the
// vocabulary.
func (r *runner) tokens(s, n int) []int {
	v := r.m.VocabSize()
	t := make([]int, n)
	for i := range t {
		t[i] = (s*7919 + i*104729 + 3) % v
	}
	return t
}

// best returns the least seconds f takes over iters runs.
func best(iters int, f func() error) (float64, error) {
	sec := math.Inf(1)
	for range iters {
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		sec = min(sec, time.Since(t0).Seconds())
	}
	return sec, nil
}

// forwardRows measures prefill and decode at batch 1 and DecodeBatch, and
// distillation.
func (r *runner) forwardRows(ctx context.Context) error {
	o, m := r.o, r.m
	capacity := o.Prompt + o.Decode + TreeNodes
	seqs := make([]*model.Sequence, DecodeBatch)
	for i := range seqs {
		s, err := m.NewSequence(capacity)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		seqs[i] = s
	}
	prefill := func(n int) ([]model.Input, error) {
		batch := make([]model.Input, n)
		for i := range batch {
			seqs[i].Reset()
			batch[i] = model.Input{Seq: seqs[i], Tokens: r.tokens(i, o.Prompt)}
		}
		_, err := m.Forward(batch, model.Options{})
		return batch, err
	}
	next := make([][1]int, DecodeBatch) // each sequence's next token, reused step after step
	decode := func(batch []model.Input) error {
		for step := range o.Decode {
			if err := ctx.Err(); err != nil {
				return err
			}
			for i := range batch {
				next[i][0] = (i*31 + step*17 + 5) % m.VocabSize()
				batch[i].Tokens = next[i][:]
			}
			if _, err := m.Forward(batch, model.Options{}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, n := range []int{1, DecodeBatch} {
		o.logf("bench: prefill and decode, batch %d", n)
		var batch []model.Input
		sec, err := best(o.Iters, func() error {
			var err error
			batch, err = prefill(n)
			return err
		})
		if err != nil {
			return fmt.Errorf("bench: prefill: %w", err)
		}
		name, dname := RowPrefill1, RowDecode1
		if n > 1 {
			name, dname = RowPrefill32, RowDecode32
		}
		r.add(name, float64(n*o.Prompt)/sec, unitTokens, fmt.Sprintf("%d sequence(s) of %d tokens in one pass, best of %d", n, o.Prompt, o.Iters))
		dsec, err := best(o.Iters, func() error {
			for i := range batch {
				if err := batch[i].Seq.Truncate(o.Prompt); err != nil {
					return err
				}
			}
			return decode(batch)
		})
		if err != nil {
			return fmt.Errorf("bench: decode: %w", err)
		}
		r.add(dname, float64(n*o.Decode)/dsec, unitTokens, fmt.Sprintf("%d steps of %d sequence(s) after the %d-token prompt, best of %d", o.Decode, n, o.Prompt, o.Iters))
		if n == 1 {
			r.step = dsec / float64(o.Decode)
		}
	}
	return r.distillRow(ctx)
}

// featureLayers returns the hidden_states indices drafter distill stores by
// default (the EAGLE-3 feature layers) and the model taps it captures.
func (r *runner) featureLayers() ([]int, []int, error) {
	layers, err := distill.Layers(r.cfg, r.m.NumLayers(), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	return layers, distill.Taps(layers, r.m.NumLayers()), nil
}

// distillRow runs DistillBatch greedy generations together through the
// generation engine with distill's default capture taps.
func (r *runner) distillRow(ctx context.Context) error {
	o, m := r.o, r.m
	o.logf("bench: distillation, batch %d", DistillBatch)
	_, taps, err := r.featureLayers()
	if err != nil {
		return err
	}
	eng, err := generate.NewEngine(m, generate.EngineOptions{Params: sample.Params{}, Seed: o.Seed, Stop: r.cfg.EOS,
		Batch: DistillBatch, Capacity: o.DistillPrompt + o.DistillTokens, Taps: taps})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	jobs := make([]generate.Job, DistillBatch)
	for i := range jobs {
		jobs[i] = generate.Job{Stream: uint64(i), Prompt: r.tokens(1000+i, o.DistillPrompt), MaxNew: o.DistillTokens}
	}
	var gen int64
	sec, err := best(o.Iters, func() error {
		before := eng.Stats().Generated
		err := eng.Run(ctx, jobs, func(generate.Done) error { return nil })
		gen = eng.Stats().Generated - before
		return err
	})
	if err != nil {
		return fmt.Errorf("bench: distillation: %w", err)
	}
	r.add(RowDistill, float64(gen)/sec, unitTokens, fmt.Sprintf("generated tokens: %d prompts of %d tokens, up to %d new each, %d taps captured (shard writing not included), best of %d",
		DistillBatch, o.DistillPrompt, o.DistillTokens, len(taps), o.Iters))
	return nil
}

// stepCosts measures eval's verification passes and draft steps, each in
// batch-1 decode steps.
func (r *runner) stepCosts(ctx context.Context) error {
	o, m := r.o, r.m
	o.logf("bench: verification and draft steps")
	_, taps, err := r.featureLayers()
	if err != nil {
		return err
	}
	seq, err := m.NewSequence(o.Prompt + TreeNodes)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	prompt := r.tokens(7, o.Prompt)
	res, err := m.Forward([]model.Input{{Seq: seq, Tokens: prompt, Logits: model.LogitsLast}}, model.Options{Taps: taps})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	// The prompt's feature rows, for the EAGLE-3 session's context.
	H := m.HiddenSize()
	feats := make([]float32, o.Prompt*3*H)
	for t := range o.Prompt {
		for c := range 3 {
			k := min(c, len(taps)-2) // the feature taps, a deduplicated layer repeated
			copy(feats[(t*3+c)*H:(t*3+c+1)*H], res.HiddenOf(k, 0)[t*H:(t+1)*H])
		}
	}
	last := make([]float32, H)
	copy(last, res.HiddenOf(len(taps)-1, 0)[(o.Prompt-1)*H:])
	verify := func(parents []int) (float64, error) {
		toks := r.tokens(11, len(parents))
		in := []model.Input{{Seq: seq, Tokens: toks, Parents: parents, Logits: model.LogitsAll}}
		return best(o.Iters, func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if _, err := m.Forward(in, model.Options{Taps: taps}); err != nil {
				return err
			}
			return seq.Commit(nil)
		})
	}
	chain := make([]int, ChainDepth+1)
	for i := range chain {
		chain[i] = i - 1
	}
	sec, err := verify(chain)
	if err != nil {
		return fmt.Errorf("bench: chain verification: %w", err)
	}
	r.add(RowVerifyChain, sec/r.step, unitDecodeSteps, fmt.Sprintf("one pass over %d chain rows with logits and the drafters' taps, after %d tokens", len(chain), o.Prompt))
	// A bushy tree: every node has up to four children, breadth first.
	tree := make([]int, TreeNodes)
	for i := range tree {
		tree[i] = (i+3)/4 - 1
	}
	if sec, err = verify(tree); err != nil {
		return fmt.Errorf("bench: tree verification: %w", err)
	}
	r.add(RowVerifyTree, sec/r.step, unitDecodeSteps, fmt.Sprintf("one pass over a %d-node tree (EAGLE's total_token) with logits and the drafters' taps", TreeNodes))
	if err := r.eagleDraftStep(ctx, feats, prompt); err != nil {
		return err
	}
	return r.medusaDraftStep(ctx, last)
}

// randomF32 returns n values uniform with standard deviation sd, drawn from
// seed.
func randomF32(n int, seed uint64, sd float64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	a := sd * math.Sqrt(3)
	v := make([]float32, n)
	for i := range v {
		v[i] = float32((rng.Float64()*2 - 1) * a)
	}
	return v
}

// draftGeometry is the EAGLE-3 draft layer drafter train eagle3 makes for
// the shape by default.
func (r *runner) draftGeometry() deagle3.Geometry {
	c := eagle3.DefaultConfig()
	g := deagle3.TargetGeometry(r.cfg, min(c.DraftVocab, r.cfg.VocabSize))
	g.Norms = deagle3.Norms{FCNorm: c.FCNorm, NormBeforeFC: c.NormBeforeFC, NormOutput: c.NormOutput}
	return g
}

// eagleDraftStep times one step of an EAGLE-3 draft session, as eval's
// proposer drafts: the draft layer over one new node, its logits over the
// draft vocabulary and their top-k.
func (r *runner) eagleDraftStep(ctx context.Context, feats []float32, prompt []int) error {
	o, m := r.o, r.m
	g := r.draftGeometry()
	p := deagle3.NewParams(g)
	copy(p.All, randomF32(len(p.All), o.Seed+1, 0.02))
	voc, err := deagle3.BuildVocab(make([]int64, g.Vocab), g.DraftVocab)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	d, err := deagle3.NewDraft(g, p, voc, m.Embed, m.Device())
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	d.Freeze()
	s := d.NewSession(o.Prompt+1, 1)
	toks := make([]int32, len(prompt))
	for i, t := range prompt {
		toks[i] = int32(t)
	}
	if err := s.Extend(feats, toks); err != nil {
		return fmt.Errorf("bench: the EAGLE-3 draft's context: %w", err)
	}
	ids, logp := make([]int32, 10), make([]float32, 10)
	sec, err := best(o.Iters, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.ClearTree()
		nodes, err := s.AddNodes([]int{-1}, ids[:1])
		if err != nil {
			return err
		}
		s.TopK(nodes[0], len(ids), ids, logp)
		return nil
	})
	if err != nil {
		return fmt.Errorf("bench: EAGLE-3 draft step: %w", err)
	}
	r.add(RowDraftEAGLE3, sec/r.step, unitDecodeSteps, fmt.Sprintf("the draft layer over one node, logits over its %d-token vocabulary and their top-10", g.DraftVocab))
	return nil
}

// medusaConfig returns drafter train medusa's default configuration, with
// the heads' lm_head shared when the options say so.
func (r *runner) medusaConfig() medusa.Config {
	c := medusa.DefaultConfig()
	c.SharedLMHead = r.o.MedusaSharedLMHead
	return c
}

// medusaDraftStep times one step of Medusa's heads as eval's proposer
// drafts: every head on the last position, then each head's top-10.
func (r *runner) medusaDraftStep(ctx context.Context, last []float32) error {
	o, m := r.o, r.m
	c := r.medusaConfig()
	g := dmedusa.Geometry{Hidden: m.HiddenSize(), Vocab: m.VocabSize(), Heads: c.Heads, Layers: c.Layers, SharedLMHead: c.SharedLMHead}
	h, err := dmedusa.NewHeads(g, randomF32(g.Vocab*g.Hidden, o.Seed+2, 0.02), false)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	for hd := range h.W {
		for l := range h.W[hd] {
			copy(h.W[hd][l], randomF32(len(h.W[hd][l]), o.Seed+3+uint64(hd*16+l), 0.02))
		}
	}
	sc, err := h.NewScorer(m.Device().Sibling(), h.Heads)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	idx := make([]int, 10)
	sec, err := best(o.Iters, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		sc.Score(last)
		for hd := range h.Heads {
			sc.TopK(hd, idx)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("bench: Medusa draft step: %w", err)
	}
	lm := "its own lm_head copy each"
	if c.SharedLMHead {
		lm = "the target's lm_head shared"
	}
	r.add(RowDraftMedusa, sec/r.step, unitDecodeSteps, fmt.Sprintf("%d heads of %d blocks (%s) on one position, each head's top-10", c.Heads, c.Layers, lm))
	return nil
}

// trainRows measures both trainers' steps on random samples of the shape.
func (r *runner) trainRows(ctx context.Context) error {
	o, cfg := r.o, r.cfg
	H, V := cfg.HiddenSize, cfg.VocabSize
	// The products drafter train uses by default on this device (bf16 on
	// a GPU's tensor cores, float32 on the CPU).
	dev, products, err := train.TrainingDevice(o.Device, train.PrecisionAuto)
	if err != nil {
		return fmt.Errorf("bench: training: %w", err)
	}
	o.logf("bench: training steps (%d-token batches, %s products)", o.TrainTokens, products)
	lmHead := randomF32(V*H, o.Seed+4, 0.02)
	embed := lmHead // tied: the same values, as the checkpoint holds them once
	if !cfg.TieWordEmbeddings {
		embed = randomF32(V*H, o.Seed+5, 0.02)
	}
	ds := randomSamples(4, o.TrainTokens, H, V, o.Seed+6)
	if err := ctx.Err(); err != nil {
		return err
	}
	mc := r.medusaConfig()
	mc.BatchTokens, mc.Seed = o.TrainTokens, o.Seed
	rate, err := medusa.StepRate(mc, lmHead, ds, dev, 1, o.TrainSteps)
	if err != nil {
		return fmt.Errorf("bench: Medusa training: %w", err)
	}
	lm := "own lm_head copies, trained"
	if mc.SharedLMHead {
		lm = "shared frozen lm_head"
	}
	r.add(RowTrainMedusa, rate, unitTokens, fmt.Sprintf("%d heads of %d blocks (%s), %d-position batches, %s products, %d timed steps (forward, backward, AdamW)", mc.Heads, mc.Layers, lm, o.TrainTokens, products, o.TrainSteps))
	if err := ctx.Err(); err != nil {
		return err
	}
	ec := eagle3.DefaultConfig()
	ec.BatchTokens, ec.MaxLength, ec.Seed = o.TrainTokens, o.TrainTokens, o.Seed
	layers := deagle3.DefaultLayers(cfg.NumLayers)
	ec.Export.LayerIDs = layers[:] // as eagle3.Options.Train fills them in
	g := deagle3.TargetGeometry(cfg, 0)
	if rate, err = eagle3.StepRate(ec, g, embed, lmHead, ds, dev, 1, o.TrainSteps); err != nil {
		return fmt.Errorf("bench: EAGLE-3 training: %w", err)
	}
	r.add(RowTrainEAGLE3, rate, unitTokens, fmt.Sprintf("TTT over %d steps, draft vocabulary %d, %d-token batches, %s products, %d timed steps (forward, backward, AdamW)", ec.Steps, min(ec.DraftVocab, V), o.TrainTokens, products, o.TrainSteps))
	return nil
}

// randomSamples returns n samples of t tokens with random states of width
// h (the final-norm state and the three EAGLE-3 features), every token a
// response token.
func randomSamples(n, t, h, v int, seed uint64) *dataset.Memory {
	rng := rand.New(rand.NewPCG(seed, 1))
	ds := &dataset.Memory{H: h}
	for i := range n {
		s := dataset.Sample{Tokens: make([]int32, t), LossMask: make([]bool, t), Final: randomF32(t*h, seed+uint64(4*i)+1, 1), Features: make([][]float32, deagle3.Features)}
		for c := range s.Features {
			s.Features[c] = randomF32(t*h, seed+uint64(4*i+c)+2, 1)
		}
		for j := range s.Tokens {
			s.Tokens[j] = int32(rng.IntN(v))
			s.LossMask[j] = true
		}
		ds.Samples = append(ds.Samples, s)
	}
	return ds
}
