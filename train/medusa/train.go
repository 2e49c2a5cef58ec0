// Package medusa trains Medusa-1 heads (pkg/drafters/medusa) on a frozen
// target's final hidden states: it packs captured positions into batches,
// computes the heads' weighted cross-entropy and its gradient, and runs the
// training loop (schedule, held-out evaluation, early stopping, checkpoints
// and resume). The heads, their export layouts and their proposer live in
// pkg/drafters/medusa.
package medusa

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/dataset"
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

	CheckpointEvery int  `json:"checkpoint_every"` // steps between checkpoints; 0 = at evaluations only
	Resume          bool `json:"resume"`           // continue from OutDir/checkpoint.safetensors when present
	LogEvery        int  `json:"log_every"`        // steps between metrics.jsonl training lines

	// Progress, when set, is called after every step (not serialised).
	Progress func(Progress) `json:"-"`
}

// DefaultConfig returns the defaults: 4 heads of 3 blocks, decay 0.8, AdamW at
// lr 1e-2 with 2% warm-up and a cosine down to 10%, clip 1.0, 5% of the
// samples held out, one evaluation per epoch, and the batch and the epoch cap
// chosen from the number of training positions P:
//
//   - batch: AutoBatchTokens(P), P/256 rounded down to a power of two within
//     [64, 4096], so that an epoch has about 256 optimiser steps on small
//     data and large data keeps GEMM-sized 4096-position batches;
//   - epochs: AutoEpochs(P), enough epochs to see about 1.5M positions, within
//     [2, 40]: 40 on a few hundred short samples, 2 from 750k positions up.
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
		Heads: 4, Layers: 3, Decay: 0.8,
		LR: 1e-2, MinLRRatio: 0.1, WarmupSteps: -1, ClipNorm: 1, BatchTokens: 0,
		MaxEpochs: 0, Patience: 10, HeldOut: 0.05, Seed: 1,
		LogEvery: 10,
	}
}

// AutoBatchTokens is the batch, in positions, used when Config.BatchTokens is
// 0: the largest power of two not above positions/256, within [64, 4096].
func AutoBatchTokens(positions int) int {
	b := 64
	for b*2 <= 4096 && b*2*256 <= positions {
		b *= 2
	}
	return b
}

// autoPositions is the number of training positions AutoEpochs aims to show
// the heads.
const autoPositions = 1_500_000

// AutoEpochs is the epoch cap used when Config.MaxEpochs is 0: enough epochs
// to see about 1.5M positions, within [2, 40].
func AutoEpochs(positions int) int {
	if positions <= 0 {
		return 40
	}
	return min(40, max(2, (autoPositions+positions-1)/positions))
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
	return nil
}

// Target is what training needs from the frozen target model.
type Target struct {
	Vocab  int
	LMHead []float32 // [Vocab, Hidden]: lm_head.weight, or the embedding when tied
}

// Progress is reported after every optimiser step.
type Progress struct {
	Step, TotalSteps int     // TotalSteps is the cap (early stopping may end sooner)
	Epoch            int     // 0-based
	Loss             float64 // this step's training loss
	TokensPerSec     float64 // positions per second, averaged since the run (re)started
	ETA              time.Duration
	Eval             *Metrics // set on steps that ran an evaluation
}

// Metrics is one held-out evaluation.
type Metrics struct {
	Step       int       `json:"step"`
	Epoch      int       `json:"epoch"`
	Loss       float64   `json:"eval_loss"`      // sum_h w_h * mean CE of head h: the training loss's definition
	HeadLoss   []float64 `json:"eval_head_loss"` // mean CE per head
	Top1       []float64 `json:"top1"`           // per head
	Top5       []float64 `json:"top5"`
	Acceptance float64   `json:"acceptance"` // 1 + sum_k prod_{j<=k} top1_j: expected tokens per step of a greedy chain if heads erred independently
	Tokens     []int     `json:"tokens"`     // evaluated positions per head
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

// Result is what Train returns.
type Result struct {
	Heads   *dmedusa.Heads // the best heads (highest held-out chain acceptance, then lowest loss), or the last when nothing is held out
	Best    *Metrics       // evaluation of the returned heads (nil without a held-out set)
	Steps   int            // optimiser steps taken
	Epochs  int            // epochs started
	Stopped string         // why training ended: "early-stop", "max-epochs", "max-steps"
	// BatchTokens and MaxEpochs are the batch and epoch cap the run used
	// (Config's, or chosen from the data where Config has 0).
	BatchTokens, MaxEpochs int
}

// Acceptance returns 1 + sum_k prod_{j<=k} top1[j], the expected number of
// tokens a greedy chain of these heads yields per target step when head j's
// top-1 is right with probability top1[j] independently of the others.
func Acceptance(top1 []float64) float64 {
	a, p := 1.0, 1.0
	for _, t := range top1 {
		p *= t
		a += p
	}
	return a
}

// sampleOrder returns a permutation of [0,n) for the given stream; each epoch
// draws its own from (seed, epoch), so a resumed run rebuilds it exactly.
func sampleOrder(n int, seed, stream uint64) []int {
	p := rand.New(rand.NewPCG(seed, stream)).Perm(n)
	return p
}

const heldOutStream = 0x6d656475 // "medu": the stream of the held-out split

// positions reads samples in order and packs their positions into batches.
type positions struct {
	data   dataset.Dataset
	heads  int
	hidden int
	vocab  int
	order  []int
	cursor int // next sample in order
	offset int // next position within it
	loaded int // order index of the sample in cur, -1 if none
	cur    dataset.Sample
	// When non-nil (evaluation), rowT and rowS receive each row's position in
	// its sample and the sample's index in order; capacity rows each.
	rowT, rowS []int32
}

// useful reports whether some head has a target at position t.
func useful(s *dataset.Sample, t, heads int) bool {
	for h := 0; h < heads; h++ {
		if j := t + h + 2; j < len(s.Tokens) && s.LossMask[j] {
			return true
		}
	}
	return false
}

// fill packs up to b capacity positions into b; it returns false at the end of
// the order.
func (p *positions) fill(b *Batch, capacity int) (bool, error) {
	b.Rows = 0
	H := p.hidden
	for b.Rows < capacity && p.cursor < len(p.order) {
		if p.loaded != p.cursor {
			i := p.order[p.cursor]
			if err := p.data.Sample(i, &p.cur, dataset.Final); err != nil {
				return false, fmt.Errorf("medusa: reading sample %d: %w", i, err)
			}
			if err := dataset.Check(i, &p.cur, dataset.Final, H, p.vocab); err != nil {
				return false, fmt.Errorf("medusa: %w", err)
			}
			p.loaded = p.cursor
		}
		s := &p.cur
		T := len(s.Tokens)
		for ; p.offset < T && b.Rows < capacity; p.offset++ {
			t := p.offset
			if !useful(s, t, p.heads) {
				continue
			}
			r := b.Rows
			if p.rowT != nil {
				p.rowT[r], p.rowS[r] = int32(t), int32(p.cursor)
			}
			copy(b.X[r*H:(r+1)*H], s.Final[t*H:(t+1)*H])
			for h := 0; h < p.heads; h++ {
				tg := int32(-1)
				if j := t + h + 2; j < T && s.LossMask[j] {
					tg = s.Tokens[j]
				}
				b.Targets[h][r] = tg
			}
			b.Rows++
		}
		if p.offset >= T {
			p.cursor++
			p.offset = 0
		}
	}
	return b.Rows > 0, nil
}

// countPositions returns the number of positions with at least one target in
// the listed samples, reading tokens and masks only.
func countPositions(data dataset.Dataset, idx []int, heads, hidden, vocab int) (int, error) {
	var s dataset.Sample
	total := 0
	for _, i := range idx {
		if err := data.Sample(i, &s, dataset.TokensOnly); err != nil {
			return 0, fmt.Errorf("medusa: reading sample %d: %w", i, err)
		}
		if err := dataset.Check(i, &s, dataset.TokensOnly, hidden, vocab); err != nil {
			return 0, fmt.Errorf("medusa: %w", err)
		}
		for t := range s.Tokens {
			if useful(&s, t, heads) {
				total++
			}
		}
	}
	return total, nil
}

// trainExtra is the trainer-specific state saved in checkpoints.
type trainExtra struct {
	BestLoss  float64  `json:"best_loss"` // meaningful when HaveBest
	HaveBest  bool     `json:"have_best"`
	BadEvals  int      `json:"bad_evals"`
	BestEval  *Metrics `json:"best_eval,omitempty"`
	LastEval  int      `json:"last_eval_step"`
	Completed bool     `json:"completed"`
}

// CheckpointFile is the name of the training checkpoint inside the output folder.
const CheckpointFile = "checkpoint.safetensors"

// MetricsFile is the name of the metrics log inside the output folder.
const MetricsFile = "metrics.jsonl"

// Train trains Medusa heads on data and returns the best heads. It writes
// metrics.jsonl and periodic checkpoints into outDir (created if needed); the
// exports are written separately by Export. When ctx is cancelled it writes a
// checkpoint and returns an error wrapping ctx.Err(); a later call with
// cfg.Resume continues and ends bit-identical to an uninterrupted run.
func Train(ctx context.Context, cfg Config, target Target, data dataset.Dataset, be tensor.Backend, outDir string) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	H := data.Hidden()
	g := dmedusa.Geometry{Hidden: H, Vocab: target.Vocab, Heads: cfg.Heads, Layers: cfg.Layers, SharedLMHead: cfg.SharedLMHead}
	m, err := dmedusa.NewHeads(g, target.LMHead, true)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("medusa: creating output folder: %w", err)
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
	heldIdx, trainIdx := split[:nHeld], split[nHeld:]
	trainPos, err := countPositions(data, trainIdx, cfg.Heads, H, target.Vocab)
	if err != nil {
		return nil, err
	}
	if trainPos == 0 {
		return nil, errors.New("medusa: no training position has a response token 2 or more tokens ahead (check the loss masks)")
	}
	// The automatic batch and epoch cap depend on the data only, so a resumed
	// run (same data, same arguments) derives the same ones.
	batchTokens, maxEpochs := cfg.BatchTokens, cfg.MaxEpochs
	if batchTokens == 0 {
		batchTokens = AutoBatchTokens(trainPos)
	}
	if maxEpochs == 0 {
		maxEpochs = AutoEpochs(trainPos)
	}
	stepsPerEpoch := (trainPos + batchTokens - 1) / batchTokens
	totalSteps := stepsPerEpoch * maxEpochs
	// MaxSteps only truncates: the schedule spans the epoch cap, so a run cut
	// short and resumed follows the same learning rates as one that was not.
	warmup := cfg.WarmupSteps
	if warmup < 0 {
		warmup = int(math.Ceil(0.02 * float64(totalSteps)))
	}
	sched := optim.Schedule{Base: cfg.LR, MinRatio: cfg.MinLRRatio, Warmup: warmup, Total: totalSteps}
	evalEvery := cfg.EvalEvery
	if evalEvery == 0 {
		evalEvery = stepsPerEpoch
	}
	ac := optim.DefaultAdamW()
	ac.WeightDecay = cfg.WeightDecay
	params := params(m)
	opt, err := optim.NewAdamW(params, ac)
	if err != nil {
		return nil, err
	}
	weights := Weights(cfg.Heads, cfg.Decay)
	ws := NewWorkspace(m, batchTokens, 0)
	batch := &Batch{X: make([]float32, batchTokens*H), Targets: make([][]int32, cfg.Heads)}
	for h := range batch.Targets {
		batch.Targets[h] = make([]int32, batchTokens)
	}
	best := make([]float32, len(m.ParamData()))
	copy(best, m.ParamData())
	args, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("medusa: encoding arguments: %w", err)
	}

	ex := trainExtra{}
	st := &optim.TrainState{Buffers: []optim.Param{{Name: "best", Data: best}}}
	ckptPath := filepath.Join(outDir, CheckpointFile)
	if cfg.Resume {
		check := func(saved json.RawMessage) error { return sameArgs(saved, cfg) }
		if _, err := optim.Resume(ckptPath, opt, st, check, &ex); err != nil {
			return nil, fmt.Errorf("medusa: %w", err)
		}
	}
	metrics, err := optim.OpenMetrics(filepath.Join(outDir, MetricsFile), int(opt.StepCount), cfg.Resume)
	if err != nil {
		return nil, fmt.Errorf("medusa: %w", err)
	}
	defer metrics.Close()

	save := func() error {
		st.Args = args
		var err error
		if st.Extra, err = json.Marshal(ex); err != nil {
			return fmt.Errorf("medusa: encoding trainer state: %w", err)
		}
		return optim.SaveCheckpoint(ckptPath, opt, st)
	}
	ev := newEvaluator(batchTokens)
	eval := func(step, epoch int) (*Metrics, error) {
		return ev.evaluate(be, ws, batch, data, heldIdx, cfg.Heads, H, target.Vocab, weights, step, epoch)
	}

	res := &Result{Heads: m, BatchTokens: batchTokens, MaxEpochs: maxEpochs}
	step := int(opt.StepCount)
	start := time.Now()
	startStep := step
	tokens := 0
	finish := func(reason string) (*Result, error) {
		res.Stopped, res.Steps, res.Epochs = reason, step, st.Epoch+1
		// The checkpoint keeps the current weights (a max-steps run may be
		// resumed); the returned heads are the best ones.
		ex.Completed = reason != "max-steps"
		if err := save(); err != nil {
			return nil, err
		}
		if nHeld > 0 && ex.HaveBest {
			copy(m.ParamData(), best)
			res.Best = ex.BestEval
		}
		return res, nil
	}
	if ex.Completed {
		return finish("resumed-complete")
	}
	pos := &positions{data: data, heads: cfg.Heads, hidden: H, vocab: target.Vocab, loaded: -1}
	for ; st.Epoch < maxEpochs; st.Epoch, st.Cursor, st.Offset = st.Epoch+1, 0, 0 {
		order := sampleOrder(len(trainIdx), cfg.Seed, uint64(st.Epoch)+1)
		for i, o := range order {
			order[i] = trainIdx[o]
		}
		pos.order, pos.cursor, pos.offset, pos.loaded = order, st.Cursor, st.Offset, -1
		for {
			if cfg.MaxSteps > 0 && step >= cfg.MaxSteps {
				return finish("max-steps")
			}
			if err := ctx.Err(); err != nil {
				if serr := save(); serr != nil {
					return nil, errors.Join(err, serr)
				}
				return nil, fmt.Errorf("medusa: training stopped at step %d, checkpoint written to %s (resume to continue): %w", step, ckptPath, err)
			}
			ok, err := pos.fill(batch, batchTokens)
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			st.Cursor, st.Offset = pos.cursor, pos.offset
			m.ZeroGrad()
			loss := ws.TrainStep(be, batch, weights)
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				return nil, fmt.Errorf("medusa: training loss became %v at step %d (lower the learning rate)", loss, step)
			}
			norm := optim.ClipGradNorm(params, cfg.ClipNorm)
			lr := sched.LR(step)
			opt.Step(lr)
			step++
			tokens += batch.Rows

			p := Progress{Step: step, TotalSteps: totalSteps, Epoch: st.Epoch, Loss: loss}
			if el := time.Since(start).Seconds(); el > 0 {
				p.TokensPerSec = float64(tokens) / el
				p.ETA = time.Duration(float64(totalSteps-step) * el / float64(step-startStep) * float64(time.Second))
			}
			if cfg.LogEvery > 0 && step%cfg.LogEvery == 0 {
				if err := metricsWrite(metrics, map[string]any{"step": step, "epoch": st.Epoch, "loss": loss, "lr": lr, "grad_norm": norm, "tokens_per_sec": p.TokensPerSec}); err != nil {
					return nil, err
				}
			}
			stop := false
			if nHeld > 0 && step%evalEvery == 0 {
				mt, err := eval(step, st.Epoch)
				if err != nil {
					return nil, err
				}
				p.Eval = mt
				ex.LastEval = step
				if !ex.HaveBest || better(mt, ex.BestEval) {
					ex.BestLoss, ex.HaveBest, ex.BadEvals, ex.BestEval = mt.Loss, true, 0, mt
					copy(best, m.ParamData())
				} else {
					ex.BadEvals++
				}
				if err := metricsWrite(metrics, mt); err != nil {
					return nil, err
				}
				stop = cfg.Patience > 0 && ex.BadEvals >= cfg.Patience
				if cfg.CheckpointEvery == 0 && !stop {
					if err := save(); err != nil {
						return nil, err
					}
				}
			}
			if cfg.CheckpointEvery > 0 && step%cfg.CheckpointEvery == 0 {
				if err := save(); err != nil {
					return nil, err
				}
			}
			if cfg.Progress != nil {
				cfg.Progress(p)
			}
			if stop {
				return finish("early-stop")
			}
		}
	}
	st.Epoch = maxEpochs - 1
	if nHeld > 0 && ex.LastEval != step {
		// A final evaluation so the last weights compete for "best".
		mt, err := eval(step, st.Epoch)
		if err != nil {
			return nil, err
		}
		if !ex.HaveBest || better(mt, ex.BestEval) {
			ex.BestLoss, ex.HaveBest, ex.BestEval = mt.Loss, true, mt
			copy(best, m.ParamData())
		}
		if err := metricsWrite(metrics, mt); err != nil {
			return nil, err
		}
	}
	return finish("max-epochs")
}

// better reports whether evaluation a beats b: a higher held-out chain
// acceptance, or an equal one with a lower loss. The chain acceptance is
// what the drafter is for; on small data the held-out loss of these heads
// stops falling (their confidence grows on what they get wrong) long before
// their top-1 accuracy stops rising.
func better(a, b *Metrics) bool {
	if b == nil {
		return true
	}
	if a.Chain != b.Chain {
		return a.Chain > b.Chain
	}
	return a.Loss < b.Loss
}

// metricsWrite appends v to the metrics log.
func metricsWrite(l *optim.MetricsLog, v any) error {
	if err := l.Write(v); err != nil {
		return fmt.Errorf("medusa: %w", err)
	}
	return nil
}

// sameArgs rejects a resume whose training arguments differ from the
// checkpoint's. Resume, the step cap (a run may be extended or cut short), the
// checkpoint and log intervals and the callback may change: they do not alter
// the trained weights.
func sameArgs(saved json.RawMessage, cfg Config) error {
	var old Config
	if err := json.Unmarshal(saved, &old); err != nil {
		return fmt.Errorf("decoding the saved arguments: %w", err)
	}
	old.Resume, cfg.Resume = false, false
	old.MaxSteps, cfg.MaxSteps = 0, 0
	old.CheckpointEvery, cfg.CheckpointEvery = 0, 0
	old.LogEvery, cfg.LogEvery = 0, 0
	old.Progress, cfg.Progress = nil, nil
	a, _ := json.Marshal(old)
	b, _ := json.Marshal(cfg)
	if string(a) != string(b) {
		return fmt.Errorf("the arguments differ from the checkpoint's (saved %s, now %s)", a, b)
	}
	return nil
}

// evaluator holds the buffers of the held-out evaluation.
type evaluator struct {
	rowT, rowS []int32 // per batch row: position and sample (index in the held-out order)
	lead       []int32 // per position of the sample being walked: leading heads right
	sample     dataset.Sample
	// walk totals of the current evaluation
	walked, steps int
}

// newEvaluator allocates an evaluator for batches of up to rows positions.
func newEvaluator(rows int) *evaluator {
	return &evaluator{rowT: make([]int32, rows), rowS: make([]int32, rows)}
}

// walk adds sample i's greedy chain walk (see Metrics.Chain) to the totals:
// from each position t whose next token is a response token it takes
// 1+lead[t] tokens (lead never runs past the response: a head without a
// target ends it).
func (e *evaluator) walk(data dataset.Dataset, i int) error {
	if err := data.Sample(i, &e.sample, dataset.TokensOnly); err != nil {
		return fmt.Errorf("medusa: reading sample %d: %w", i, err)
	}
	mask := e.sample.LossMask
	T := len(mask)
	lead := e.lead[:T]
	for t := 0; t < T-1; {
		if !mask[t+1] {
			t++
			continue
		}
		a := 1 + int(lead[t])
		e.steps++
		e.walked += a
		t += a
	}
	return nil
}

// startSample resets the per-position leads for a sample of T tokens.
func (e *evaluator) startSample(T int) {
	if cap(e.lead) < T {
		e.lead = make([]int32, T)
	}
	clear(e.lead[:T])
}

// evaluate runs the heads over every position of the held-out samples idx.
func (e *evaluator) evaluate(be tensor.Backend, ws *Workspace, b *Batch, data dataset.Dataset, idx []int, heads, H, vocab int, w []float64, step, epoch int) (*Metrics, error) {
	mt := &Metrics{Step: step, Epoch: epoch, HeadLoss: make([]float64, heads), Top1: make([]float64, heads), Top5: make([]float64, heads), Tokens: make([]int, heads)}
	t1, t5 := make([]int, heads), make([]int, heads)
	p := &positions{data: data, heads: heads, hidden: H, vocab: vocab, order: idx, loaded: -1, rowT: e.rowT, rowS: e.rowS}
	e.walked, e.steps = 0, 0
	// Rows arrive in held-out order; sample k collects leads until a row of a
	// later sample shows up, then it is walked.
	k := 0
	if len(idx) > 0 {
		if err := data.Sample(idx[0], &e.sample, dataset.TokensOnly); err != nil {
			return nil, fmt.Errorf("medusa: reading sample %d: %w", idx[0], err)
		}
		e.startSample(len(e.sample.Tokens))
	}
	next := func() error {
		if err := e.walk(data, idx[k]); err != nil {
			return err
		}
		k++
		if k < len(idx) {
			if err := data.Sample(idx[k], &e.sample, dataset.TokensOnly); err != nil {
				return fmt.Errorf("medusa: reading sample %d: %w", idx[k], err)
			}
			e.startSample(len(e.sample.Tokens))
		}
		return nil
	}
	for {
		ok, err := p.fill(b, ws.MaxRows)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		ws.Evaluate(be, b)
		leads := ws.Leads(b.Rows)
		for r, l := range leads {
			for int(e.rowS[r]) > k {
				if err := next(); err != nil {
					return nil, err
				}
			}
			e.lead[e.rowT[r]] = l
		}
		rows, ce, top1, top5 := ws.Stats()
		for h := 0; h < heads; h++ {
			mt.Tokens[h] += rows[h]
			mt.HeadLoss[h] += ce[h]
			t1[h] += top1[h]
			t5[h] += top5[h]
		}
	}
	for h := 0; h < heads; h++ {
		if mt.Tokens[h] > 0 {
			k := float64(mt.Tokens[h])
			mt.HeadLoss[h] /= k
			mt.Top1[h], mt.Top5[h] = float64(t1[h])/k, float64(t5[h])/k
		}
		mt.Loss += w[h] * mt.HeadLoss[h]
	}
	for k < len(idx) {
		if err := next(); err != nil {
			return nil, err
		}
	}
	mt.Acceptance = Acceptance(mt.Top1)
	mt.ChainSteps = e.steps
	if e.steps > 0 {
		mt.Chain = float64(e.walked) / float64(e.steps)
	}
	return mt, nil
}
