// Package medusa trains Medusa-1 heads (pkg/drafters/medusa) on a frozen
// target's final hidden states: it packs captured positions into batches
// (batch.go), computes the heads' weighted cross-entropy and its gradient
// (step.go) and their held-out chain acceptance (heldout.go), and trains
// with the shared loop (train/loop), which owns the schedule, checkpoints,
// resume, evaluation cadence and early stopping. The heads, their export
// layouts and their proposer live in pkg/drafters/medusa.
package medusa

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/spec"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/lkloss"
	"github.com/drafter-ai/drafter/train/loop"
	"github.com/drafter-ai/drafter/train/optim"
)

// Config holds the training arguments. DefaultConfig gives values that train
// well without tuning. A zero field is NOT replaced by its default, except
// BatchTokens and MaxEpochs, where 0 means "chosen from the data" (see
// DefaultConfig).
type Config struct {
	Heads        int     `json:"heads"`          // number of Medusa heads
	Layers       int     `json:"layers"`         // residual blocks per head
	SharedLMHead bool    `json:"shared_lm_head"` // use the target's lm_head, frozen
	Decay        float64 `json:"decay"`          // loss weight of head h is Decay^h (1 = equal)
	// Loss is the heads' loss (lkloss.Parse's spelling): "" or lkloss.CE,
	// the cross-entropy toward the data's tokens (the default, and what
	// runs recorded before the setting existed), or an LK loss against the
	// same tokens as one-hot targets (α = the head's probability of its
	// token). LKEta is lk_hybrid's η (0: lkloss.DefaultEta), set only with
	// a loss that weighs lk_hybrid. A run records both canonically.
	Loss  string  `json:"loss,omitempty"`
	LKEta float64 `json:"lk_eta,omitempty"`

	LR          float64 `json:"lr"`           // peak learning rate
	MinLRRatio  float64 `json:"min_lr_ratio"` // cosine floor as a fraction of LR
	WarmupSteps int     `json:"warmup_steps"` // linear warm-up; -1 means 2% of the scheduled steps
	WeightDecay float64 `json:"weight_decay"` // AdamW decoupled decay
	ClipNorm    float64 `json:"clip_norm"`    // global gradient-norm clip; <= 0 disables
	BatchTokens int     `json:"batch_tokens"` // positions per optimiser step; 0 = AutoBatchTokens of the training positions

	MaxEpochs int     `json:"max_epochs"` // epoch cap (the cosine schedule spans it); 0 = AutoEpochs of the training positions
	MaxSteps  int     `json:"max_steps"`  // stop after this many steps in total; 0 = no limit
	Patience  int     `json:"patience"`   // evaluations without a better held-out chain acceptance before stopping; 0 = never stop early
	EvalEvery int     `json:"eval_every"` // steps between evaluations; 0 = once per epoch
	HeldOut   float64 `json:"held_out"`   // fraction of samples held out for evaluation
	Seed      uint64  `json:"seed"`

	CheckpointEvery int  `json:"checkpoint_every"` // steps between checkpoints besides those at evaluations; 0 = at evaluations only
	Resume          bool `json:"resume"`           // continue from the checkpoint in the output folder when present
	LogEvery        int  `json:"log_every"`        // steps between metrics.jsonl training lines

	// DType is the export's dtype: F32 (when empty), BF16 or F16 (not
	// recorded: it does not change the training).
	DType safetensors.DType `json:"-"`
	// TreeNodes is the size of the tree written into drafter.json as the
	// heads' default for tree decoding: the TreeNodes paths most likely to
	// be accepted given the best evaluation's per-head rank accuracies
	// (spec.CalibratedChoices, Medusa's calibrated sparse tree); 0 writes
	// none (eval then uses spec.DefaultChoices). Not recorded: it does not
	// change the training.
	TreeNodes int `json:"-"`
	// Progress, when set, is called after every step and evaluation (not
	// recorded).
	Progress func(Progress) `json:"-"`
}

// Progress is reported after every step and evaluation.
type Progress = loop.Progress[*Metrics]

// DefaultConfig returns the defaults: 6 heads of 3 blocks, decay 0.8, AdamW at
// lr 1e-2 with 2% warm-up and a cosine down to 10%, clip 1.0, 5% of the
// samples held out, one evaluation per epoch, and the batch and the epoch cap
// chosen from the number of training positions P:
//
//   - batch: AutoBatchTokens(P), P/256 rounded down to a power of two within
//     [64, 4096], so that an epoch has about 256 optimiser steps on small
//     data and large data keeps GEMM-sized 4096-position batches;
//   - epochs: AutoEpochs(P), enough epochs to see about 5M positions, within
//     [2, 40]: 40 on a few hundred short samples, 2 from 2.5M positions up.
//
// The run keeps the heads with the best held-out chain acceptance
// (Metrics.Chain, what drafter eval's chain mode measures) and stops after 10
// evaluations without a better one. On stories260k (400 samples of 96 greedy
// tokens, 37k training positions: batch 128, 40 epochs; about 1.5
// CPU-minutes with one block per head, 3 with three) single-block heads
// trained with batches of 64 to 512 positions and 40 or 100 epochs all score
// within 0.1 of each other in drafter eval (chain 2.52 to 2.61, tree 3.07 to
// 3.16), lr 3e-3 and 2e-2 trail by 0.1, and weight decay 0.1 changes
// nothing. The previous defaults (4096-token batches, 100 epochs, stopping
// after 5 evaluations without a lower held-out loss) stopped at epoch 69 with
// the learning rate still high: the held-out loss of these heads flattens
// long before their top-1 accuracy stops rising.
//
// Blocks per head: 3, not Medusa-1's usual 1. On stories260k single-block
// heads generalise poorly (held-out top-1 well below the training
// positions'), yet everything that restrained them made drafter eval worse
// (input noise, training on the target's own distribution, weight averaging,
// equal head weights); capacity helps. drafter eval with seeds 1, 2, 3:
//
//	1 block   chain 2.61 2.53 2.55  tree 3.15 3.09 3.06
//	2 blocks  chain 2.70 2.69 2.64  tree 3.22 3.24 3.19
//	3 blocks  chain 2.73 2.69 2.70  tree 3.28 3.23 3.24
//	4 blocks  chain 2.70            tree 3.27
//
// Heads: 6, not 4. Given that the heads before it were right, a deeper head
// is right about as often as a shallow one (0.73-0.83 at every depth on
// stories260k), so each head adds to the chain, and the calibrated tree,
// whose node budget is fixed, spends its nodes better. On the 8400-prompt
// data with every other default (docs/acceptance.md):
//
//	heads     4     5     6     7     8
//	chain   3.10  3.27  3.45  3.55  3.61
//	tree    4.08  4.43  4.61  4.71  4.74
//
// The first four heads of a 6-head run draft a chain of 4 as well as 4
// heads do (3.12), so --heads buys depth only. Beyond 6 a head adds less
// than 4% to the tree's acceptance (+0.10, then +0.03). Each head adds its
// own lm_head (V*H values) to the export and to the draft step: with a
// large vocabulary on a small target, --heads 4 or --shared-lm-head is
// cheaper.
//
// 60 epochs instead of 40 lose (3 blocks: chain 2.64, tree 3.16); one block
// applied twice does not help (chain 2.55, tree 3.07). A block costs H*H+H
// values per head, next to the lm_head's V*H. vLLM and TensorRT-LLM's
// converter read one block per layer, as this repository's evaluation does;
// FasterDecoding/Medusa's own MedusaModel builds [ResBlock] *
// medusa_num_layers, ONE block applied that many times, so with Layers > 1
// the medusa/ export does not load correctly in that research code: train
// with --layers 1 for it.
func DefaultConfig() Config {
	return Config{
		Heads: 6, Layers: 3, Decay: 0.8,
		LR: 1e-2, MinLRRatio: 0.1, WarmupSteps: -1, ClipNorm: 1, BatchTokens: 0,
		MaxEpochs: 0, Patience: 10, HeldOut: 0.05, Seed: 1,
		LogEvery: 10, TreeNodes: DefaultTreeNodes,
	}
}

// DefaultTreeNodes is the default size of the calibrated tree: the size of
// Medusa's own default tree (mc_sim_7b_63).
const DefaultTreeNodes = 63

// AutoBatchTokens is the batch, in positions, used when Config.BatchTokens is
// 0: the largest power of two not above positions/256, within [64, 4096].
func AutoBatchTokens(positions int) int {
	b := 64
	for b*2 <= 4096 && b*2*256 <= positions {
		b *= 2
	}
	return b
}

// AutoPositions is the number of training positions AutoEpochs aims to show
// the heads: on 8000 distilled stories260k stories (about 800k positions),
// 7 epochs (about 5.6M) accept 3.10 / 4.08 (chain / calibrated tree) where
// 1.5M positions (2 epochs) accept 2.91 (docs/acceptance.md).
const AutoPositions = 5_000_000

// AutoEpochs is the epoch cap used when Config.MaxEpochs is 0: enough epochs
// to see about 5M positions, within [2, 40].
func AutoEpochs(positions int) int {
	if positions <= 0 {
		return 40
	}
	return min(40, max(2, (AutoPositions+positions-1)/positions))
}

func (c *Config) validate() error {
	switch {
	case c.Heads < 1:
		return fmt.Errorf("medusa: heads must be >= 1, got %d", c.Heads)
	case c.Layers < 0:
		return fmt.Errorf("medusa: layers must be >= 0, got %d", c.Layers)
	case !(c.Decay > 0 && c.Decay <= 1):
		return fmt.Errorf("medusa: decay must lie in (0,1], got %g", c.Decay)
	case !(c.LR > 0):
		return fmt.Errorf("medusa: lr must be > 0, got %g", c.LR)
	case c.MinLRRatio < 0 || c.MinLRRatio > 1:
		return fmt.Errorf("medusa: min-lr ratio must lie in [0,1], got %g", c.MinLRRatio)
	case c.BatchTokens < 0:
		return fmt.Errorf("medusa: batch tokens must be >= 1 (or 0: chosen from the data), got %d", c.BatchTokens)
	case c.MaxEpochs < 0:
		return fmt.Errorf("medusa: max epochs must be >= 1 (or 0: chosen from the data), got %d", c.MaxEpochs)
	case c.HeldOut < 0 || c.HeldOut >= 1:
		return fmt.Errorf("medusa: held-out fraction must lie in [0,1), got %g", c.HeldOut)
	case c.Patience < 0 || c.MaxSteps < 0 || c.EvalEvery < 0 || c.CheckpointEvery < 0 || c.LogEvery < 0 || c.WarmupSteps < -1:
		return fmt.Errorf("medusa: patience, max steps, eval/checkpoint/log intervals and warm-up must not be negative")
	}
	if _, err := lkloss.Parse(c.Loss, c.LKEta); err != nil {
		return fmt.Errorf("medusa: %w", err)
	}
	return nil
}

// loss returns the parsed Loss (validate has checked it).
func (c *Config) loss() lkloss.Loss {
	l, _ := lkloss.Parse(c.Loss, c.LKEta)
	return l
}

// settings returns c as the run records it: the loss in its canonical
// spelling and η as used, only with a loss that weighs lk_hybrid, so that
// every spelling of the same training records the same settings.
func (c Config) settings() Config {
	c.Loss, c.LKEta = lkloss.Recorded(c.Loss, c.LKEta)
	return c
}

// Metrics is one held-out evaluation.
type Metrics struct {
	Step       int       `json:"step"`
	Epoch      int       `json:"epoch"`
	Loss       float64   `json:"eval_loss"`       // sum_h w_h * mean CE of head h: the training loss's definition with --loss ce (the cross-entropy whatever the loss)
	HeadLoss   []float64 `json:"eval_head_loss"`  // mean CE per head
	Alpha      []float64 `json:"alpha,omitempty"` // with an LK loss: mean α = q_t per head, what it trains
	Top1       []float64 `json:"top1"`            // per head
	Top5       []float64 `json:"top5"`
	Acceptance float64   `json:"acceptance"` // 1 + sum_k prod_{j<=k} top1_j: expected tokens per step of a greedy chain if heads erred independently
	Tokens     []int     `json:"tokens"`     // evaluated positions per head
	// RankAccuracy[h][r] is the share of head h's evaluated positions whose
	// target it ranked r-th (r < RankBins): the calibration from which the
	// export's default tree is built (spec.CalibratedChoices).
	RankAccuracy [][]float64 `json:"rank_accuracy"`
	// Chain is the greedy chain acceptance length measured on the held-out
	// samples. Each response is walked the way speculative decoding with a
	// chain of the heads' top-1 guesses would walk it: from the state before
	// its first token, each step takes 1 + (number of leading heads that are
	// right) tokens. Chain is the tokens walked over ChainSteps, the steps
	// taken. On greedy self-distilled data this is what drafter eval's chain
	// mode measures on those samples. Unlike Acceptance it keeps the heads'
	// errors as correlated as they are and weighs positions as decoding
	// visits them.
	Chain      float64 `json:"chain_acceptance"`
	ChainSteps int     `json:"chain_steps"`
}

// Result is what Train returns: the loop's result (Best is the evaluation
// of the returned heads, nil without a held-out set), and the heads.
type Result struct {
	loop.Result[*Metrics]
	// Heads are the best heads (highest held-out chain acceptance, then
	// lowest loss), or the last when nothing is held out, read back from
	// the device.
	Heads *dmedusa.Heads
	// BatchTokens and MaxEpochs are the batch and epoch cap the run used
	// (Config's, or chosen from the data where Config has 0).
	BatchTokens, MaxEpochs int
}

// Better reports whether evaluation m beats b: a higher held-out chain
// acceptance, or an equal one with a lower loss. The chain acceptance is
// what the drafter is for; on small data the held-out loss of these heads
// stops falling (their confidence grows on what they get wrong) long before
// their top-1 accuracy stops rising.
func (m *Metrics) Better(b *Metrics) bool {
	if m.Chain != b.Chain {
		return m.Chain > b.Chain
	}
	return m.Loss < b.Loss
}

// Record returns the evaluation as its metrics.jsonl line.
func (m *Metrics) Record(best bool) any { return m }

// Summary describes the evaluation for the progress report.
func (m *Metrics) Summary() string {
	return fmt.Sprintf("eval step %d: loss %.4f  top-1 %s  top-5 %s  acceptance %.3f  chain %.3f",
		m.Step, m.Loss, loop.FormatFloats(m.Top1), loop.FormatFloats(m.Top5), m.Acceptance, m.Chain)
}

// Train trains Medusa heads on data with the shared loop (train/loop) and
// exports the best ones into job.Out (dmedusa.Export, with cfg.DType and
// job.Provenance). lmHead is the target's [vocab, hidden] output layer
// (lm_head.weight, or the embedding when tied): the heads start from it, and
// with cfg.SharedLMHead share it frozen. When ctx is cancelled it writes a
// checkpoint and returns an error wrapping ctx.Err(); a later call with
// cfg.Resume continues and ends bit-identical to an uninterrupted run.
func Train(ctx context.Context, cfg Config, lmHead []float32, data dataset.Dataset, dev tensor.Device, job *loop.Job) (*Result, error) {
	t, err := newTrainer(cfg, lmHead, data, dev)
	if err != nil {
		return nil, err
	}
	// Runs recorded before --loss existed trained with the cross-entropy.
	unrecorded := map[string]any{"loss": lkloss.CE}
	lc := loop.Config[*Metrics]{Method: string(dmedusa.Kind), Settings: cfg.settings(), Unrecorded: unrecorded, LR: cfg.LR, MinLRRatio: cfg.MinLRRatio, ClipNorm: cfg.ClipNorm,
		MaxSteps: cfg.MaxSteps, Patience: cfg.Patience, EvalEvery: cfg.EvalEvery, CheckpointEvery: cfg.CheckpointEvery,
		LogEvery: cfg.LogEvery, Resume: cfg.Resume, Progress: cfg.Progress}
	r, err := loop.Run(ctx, lc, job, t)
	if err != nil {
		return nil, err
	}
	return &Result{Result: *r, Heads: t.heads, BatchTokens: t.batchTokens, MaxEpochs: t.maxEpochs}, nil
}

// trainer is the Medusa side of the loop (loop.Trainer).
type trainer struct {
	cfg     Config
	data    dataset.Dataset
	heads   *dmedusa.Heads
	hidden  int
	vocab   int
	weights []float64 // per-head loss weights
	ws      *Workspace
	batch   *Batch
	pos     *positions
	ev      *evaluator

	heldIdx, trainIdx      []int
	batchTokens, maxEpochs int
	stepsPerEpoch          int
}

// newTrainer builds the heads and splits the samples: a seeded held-out
// share, the rest trained on, their positions counted to choose the batch
// and the epoch cap where cfg leaves them to the data.
func newTrainer(cfg Config, lmHead []float32, data dataset.Dataset, dev tensor.Device) (*trainer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	H := data.Hidden()
	if H <= 0 || len(lmHead)%H != 0 {
		return nil, fmt.Errorf("medusa: the target lm_head has %d values, not a whole number of rows of the data's hidden size %d", len(lmHead), H)
	}
	t := &trainer{cfg: cfg, data: data, hidden: H, vocab: len(lmHead) / H}
	g := dmedusa.Geometry{Hidden: H, Vocab: t.vocab, Heads: cfg.Heads, Layers: cfg.Layers, SharedLMHead: cfg.SharedLMHead}
	var err error
	if t.heads, err = dmedusa.NewHeads(g, lmHead, true); err != nil {
		return nil, err
	}
	n := data.NumSamples()
	if n == 0 {
		return nil, errors.New("medusa: the dataset has no samples")
	}
	split := sampleOrder(n, cfg.Seed, heldOutStream)
	nHeld := int(math.Round(cfg.HeldOut * float64(n)))
	if cfg.HeldOut > 0 && nHeld == 0 && n >= 2 {
		nHeld = 1
	}
	if nHeld >= n {
		nHeld = n - 1
	}
	t.heldIdx, t.trainIdx = split[:nHeld], split[nHeld:]
	trainPos, err := countPositions(data, t.trainIdx, cfg.Heads, H, t.vocab)
	if err != nil {
		return nil, err
	}
	if trainPos == 0 {
		return nil, errors.New("medusa: no training position has a response token 2 or more tokens ahead (check the loss masks)")
	}
	// The automatic batch and epoch cap depend on the data only, so a resumed
	// run (same data, same arguments) derives the same ones.
	t.batchTokens, t.maxEpochs = cfg.BatchTokens, cfg.MaxEpochs
	if t.batchTokens == 0 {
		t.batchTokens = AutoBatchTokens(trainPos)
	}
	if t.maxEpochs == 0 {
		t.maxEpochs = AutoEpochs(trainPos)
	}
	t.stepsPerEpoch = (trainPos + t.batchTokens - 1) / t.batchTokens
	t.weights = Weights(cfg.Heads, cfg.Decay)
	if t.ws, err = NewWorkspace(cpu.SiblingOf(dev), t.heads, t.batchTokens, 0); err != nil {
		return nil, err
	}
	if l := cfg.loss(); !l.CE {
		t.ws.UseLK(l.LK)
	}
	t.batch = &Batch{X: make([]float32, t.batchTokens*H), Targets: make([][]int32, cfg.Heads)}
	for h := range t.batch.Targets {
		t.batch.Targets[h] = make([]int32, t.batchTokens)
	}
	t.pos = &positions{data: data, heads: cfg.Heads, hidden: H, vocab: t.vocab, loaded: -1}
	t.ev = newEvaluator(t.batchTokens)
	return t, nil
}

// Device is the device the heads train on (the workspace's).
func (t *trainer) Device() tensor.Device { return t.ws.dev }

// Params lists the heads' trainable tensors on the device under their vLLM
// names.
func (t *trainer) Params() []optim.Param { return t.ws.params() }

// Plan: every epoch packs the same training positions, so it has the same
// number of batches; the warm-up is cfg's, or 2% of the scheduled steps.
func (t *trainer) Plan() loop.Plan {
	steps := make([]int, t.maxEpochs)
	for e := range steps {
		steps[e] = t.stepsPerEpoch
	}
	warmup := t.cfg.WarmupSteps
	if warmup < 0 {
		warmup = int(math.Ceil(0.02 * float64(t.stepsPerEpoch*t.maxEpochs)))
	}
	ac := optim.DefaultAdamW()
	ac.WeightDecay = t.cfg.WeightDecay
	return loop.Plan{EpochSteps: steps, Warmup: warmup, HeldOut: len(t.heldIdx) > 0, AdamW: ac}
}

// Seek orders the training samples for epoch, from (seed, epoch), and
// starts at pos: a sample in that order and a position in it.
func (t *trainer) Seek(epoch int, pos loop.Position) error {
	order := sampleOrder(len(t.trainIdx), t.cfg.Seed, uint64(epoch)+1)
	for i, o := range order {
		order[i] = t.trainIdx[o]
	}
	t.pos.order, t.pos.cursor, t.pos.offset, t.pos.loaded = order, pos.Cursor, pos.Offset, -1
	return nil
}

// Next packs the next batchTokens positions.
func (t *trainer) Next() (bool, error) { return t.pos.fill(t.batch, t.batchTokens) }

// Position is the sample and position the next batch starts at.
func (t *trainer) Position() loop.Position {
	return loop.Position{Cursor: t.pos.cursor, Offset: t.pos.offset}
}

// Step runs the heads forward and backward over the batch.
func (t *trainer) Step() (float64, int) {
	return t.ws.TrainStep(t.batch, t.weights), t.batch.Rows
}

// Evaluate measures the heads on the held-out samples (Metrics).
func (t *trainer) Evaluate(e loop.Eval) (*Metrics, error) {
	return t.ev.evaluate(t.ws, t.batch, t.data, t.heldIdx, t.cfg.Heads, t.hidden, t.vocab, t.weights, e.Step, e.Epoch)
}

// TrainLine is a step's metrics.jsonl line.
func (t *trainer) TrainLine(s loop.StepStats) any {
	line := map[string]any{"step": s.Step, "epoch": s.Epoch, "loss": s.Loss, "lr": s.LR, "grad_norm": s.GradNorm, "tokens_per_sec": s.TokensPerSec}
	if t.ws.useLK {
		// Each head's mean α over the step's positions: the LK losses'
		// own measure of acceptance, which their kernel computes anyway.
		line["alpha"] = slices.Clone(t.ws.Alpha())
	}
	return line
}

// Export reads the heads' weights back from the device and writes them in
// both layouts, with drafter.json.
func (t *trainer) Export(job *loop.Job, r *loop.Result[*Metrics]) error {
	t.ws.n.ReadWeights()
	p := job.Provenance
	set := t.cfg.settings()
	var tree spec.Choices
	if r.Best != nil && t.cfg.TreeNodes > 0 {
		var err error
		if tree, err = spec.CalibratedChoices(r.Best.RankAccuracy, t.cfg.TreeNodes); err != nil {
			return fmt.Errorf("medusa: the calibrated tree: %w", err)
		}
	}
	return dmedusa.Export(job.Out, t.heads, dmedusa.ExportInfo{BaseModel: p.BaseModel, TargetFingerprint: p.TargetFingerprint,
		DataManifests: p.DataManifests, Args: p.Args, Metrics: r.Best, DType: t.cfg.DType, Loss: set.Loss, LKEta: set.LKEta, Tree: tree})
}
