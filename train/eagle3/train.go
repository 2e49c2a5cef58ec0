package eagle3

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/optim"
)

// Config holds a training run's settings. Zero values take the defaults noted.
//
// The defaults are tuned to train well without tuning: SpecForge's lr 1e-4 is
// far too low for small runs (a PyTorch re-implementation on 400 stories260k
// samples reached held-out step-0 accuracy 0.756 at 1e-4 after 40 epochs, 0.881
// at 1e-3 and 0.891 at 3e-3), so the default is 2e-3 with early stopping on the
// held-out loss and an epoch cap, keeping the best weights.
type Config struct {
	// Target is the frozen target: geometry, embedding and lm_head.
	Target *Target
	// DraftVocab is N (default 32000, capped at V).
	DraftVocab int
	// Steps is the TTT unroll length (default 7); StepDecay the per-step loss
	// weight base (default 0.8: step k weighs 0.8^k).
	Steps     int
	StepDecay float64
	// LR is the peak learning rate (default 2e-3); WarmupFrac the linear
	// warm-up share of all updates (default 0.015); MinLRRatio the floor of the
	// cosine decay as a fraction of LR (default 0); ClipNorm the global
	// gradient-norm clip (default 0.5, negative disables); WeightDecay AdamW's
	// decoupled decay (default 0); Beta2 AdamW's second-moment rate (default
	// 0.999).
	LR, WarmupFrac, MinLRRatio, ClipNorm, WeightDecay, Beta2 float64
	// BatchTokens is the batch size in tokens (default 2048); MaxLength
	// truncates each sample (default min(2048, BatchTokens)).
	BatchTokens, MaxLength int
	// Epochs caps the run (default 40); Patience stops it after that many
	// evaluations without a lower held-out loss (default 4, negative: never).
	Epochs, Patience int
	// EvalFraction of the samples (default 0.1, at least one when there are two
	// or more) is held out for evaluation, chosen by Seed.
	EvalFraction float64
	// Seed drives initialisation, the held-out split and the sample order.
	Seed uint64
	// Export says how to write the result (layout, layer ids, drafter.json).
	Export ExportOptions
	// Drafter is extra content for drafter.json (fingerprint, data manifest,
	// arguments); the trainer adds "method" and "final_metrics".
	Drafter map[string]any
	// CheckpointEvery saves the training state every that many updates (and at
	// each epoch end); 0 saves at epoch ends only. Resume continues from
	// out/checkpoint.safetensors when it exists.
	CheckpointEvery int
	Resume          bool
	// LogEvery writes a training line to metrics.jsonl every that many updates
	// (default 10).
	LogEvery int
	// Progress, when set, is called after every update and evaluation.
	Progress func(Progress)
}

// Progress reports where a run is.
type Progress struct {
	Epoch, Step, TotalSteps int
	Loss, LR                float64
	TokensPerSec            float64
	Eval                    *EvalMetrics // set after an evaluation
}

// EvalMetrics are held-out results: the loss (as trained: sum over steps of
// 0.8^k times the step's mean soft cross-entropy), the per-step accuracy
// acc_k (draft argmax == target argmax among rows whose predicted token is a
// response token; a target argmax outside the draft vocabulary is a miss) and
// the chain acceptance length they imply, 1 + sum_k prod_{j<=k} acc_j.
type EvalMetrics struct {
	Loss       float64   `json:"loss"`
	StepLoss   []float64 `json:"step_loss"`
	Accuracy   []float64 `json:"accuracy"`
	AcceptLen  float64   `json:"accept_length"`
	Tokens     int       `json:"tokens"`
	Epoch      int       `json:"epoch"`
	Step       int       `json:"step"`
	BestSoFar  bool      `json:"best"`
	TrainLoss  float64   `json:"train_loss"`
	ElapsedSec float64   `json:"elapsed_s"`
}

// Result summarises a finished run.
type Result struct {
	Best      EvalMetrics
	Steps     int
	Epochs    int
	Vocab     *Vocab
	Geometry  Geometry
	ExportDir string
}

func (c *Config) defaults(v int) {
	if c.DraftVocab == 0 {
		c.DraftVocab = DefaultDraftVocab
	}
	c.DraftVocab = min(c.DraftVocab, v)
	if c.Steps == 0 {
		c.Steps = 7
	}
	if c.StepDecay == 0 {
		c.StepDecay = 0.8
	}
	if c.LR == 0 {
		c.LR = 2e-3
	}
	if c.WarmupFrac == 0 {
		c.WarmupFrac = 0.015
	}
	if c.ClipNorm == 0 {
		c.ClipNorm = 0.5
	}
	if c.Beta2 == 0 {
		c.Beta2 = 0.999
	}
	if c.BatchTokens == 0 {
		c.BatchTokens = 2048
	}
	if c.MaxLength == 0 {
		c.MaxLength = min(2048, c.BatchTokens)
	}
	if c.Epochs == 0 {
		c.Epochs = 40
	}
	if c.Patience == 0 {
		c.Patience = 4
	}
	if c.EvalFraction == 0 {
		c.EvalFraction = 0.1
	}
	if c.LogEvery == 0 {
		c.LogEvery = 10
	}
}

// trainExtra is the trainer-specific part of a checkpoint.
type trainExtra struct {
	Best      float64     `json:"best"`
	BestEval  EvalMetrics `json:"best_eval"`
	Bad       int         `json:"bad"`
	Done      bool        `json:"done"`
	LossSum   float64     `json:"loss_sum"`
	LossCount int         `json:"loss_count"`
}

// Train trains an EAGLE-3 draft layer on ds and writes into out:
// eagle3/ (the exported draft: config.json, model.safetensors, drafter.json),
// metrics.jsonl (one JSON object per logged update and per evaluation) and
// checkpoint.safetensors (the resumable state). Cancelling ctx saves a
// checkpoint and returns ctx's error; a later run with Resume continues
// bit-identically.
func Train(ctx context.Context, cfg Config, ds Dataset, be tensor.Backend, out string) (*Result, error) {
	if cfg.Target == nil {
		return nil, errors.New("eagle3: Config.Target is nil")
	}
	tg := cfg.Target
	g := tg.Geometry
	cfg.defaults(g.Vocab)
	g.DraftVocab = cfg.DraftVocab
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if len(tg.Embed) != g.Vocab*g.Hidden || len(tg.LMHead) != g.Vocab*g.Hidden {
		return nil, fmt.Errorf("eagle3: target embedding has %d values and lm_head %d, want vocab %d x hidden %d each", len(tg.Embed), len(tg.LMHead), g.Vocab, g.Hidden)
	}
	if cfg.MaxLength > cfg.BatchTokens {
		return nil, fmt.Errorf("eagle3: max length %d exceeds the batch size of %d tokens", cfg.MaxLength, cfg.BatchTokens)
	}
	if ds.Len() < 2 {
		return nil, fmt.Errorf("eagle3: need at least 2 samples (one held out), got %d", ds.Len())
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("eagle3: %w", err)
	}

	// Split, lengths, vocabulary.
	perm := rand.New(rand.NewPCG(cfg.Seed, 1)).Perm(ds.Len())
	nEval := max(1, int(math.Round(cfg.EvalFraction*float64(ds.Len()))))
	nEval = min(nEval, ds.Len()-1)
	evalIdx, trainIdx := append([]int(nil), perm[:nEval]...), append([]int(nil), perm[nEval:]...)
	sort.Ints(evalIdx)
	sort.Ints(trainIdx)
	lengths := make([]int, ds.Len())
	counts := make([]int64, g.Vocab)
	for _, i := range trainIdx {
		s, err := ds.Sample(i)
		if err != nil {
			return nil, fmt.Errorf("eagle3: reading sample %d: %w", i, err)
		}
		if err := countInto(counts, s, i); err != nil {
			return nil, err
		}
		lengths[i] = len(s.Tokens)
	}
	for _, i := range evalIdx {
		s, err := ds.Sample(i)
		if err != nil {
			return nil, fmt.Errorf("eagle3: reading sample %d: %w", i, err)
		}
		lengths[i] = len(s.Tokens)
	}
	voc, err := BuildVocab(counts, g.DraftVocab)
	if err != nil {
		return nil, err
	}

	p := newParams(g)
	initParams(p, g, cfg.Seed, tg.LMHead, voc)
	n, err := newNet(g, cfg.Steps, cfg.StepDecay, be, p, tg.Embed, tg.LMHead, voc, cfg.BatchTokens, cfg.MaxLength, true)
	if err != nil {
		return nil, err
	}
	var params []optim.Param
	ss := specs(g)
	for _, s := range ss {
		params = append(params, optim.Param{Name: s.name, Data: *s.field(p), Grad: *s.field(n.gr)})
	}
	opt, err := optim.NewAdamW(params, optim.AdamWConfig{Beta1: 0.9, Beta2: cfg.Beta2, Eps: 1e-8, WeightDecay: cfg.WeightDecay})
	if err != nil {
		return nil, err
	}
	best := make([]float32, len(p.All))
	copy(best, p.All)

	// Batches per epoch: a seeded order packed greedily by tokens.
	epochBatches := func(epoch int) [][]int {
		order := append([]int(nil), trainIdx...)
		rand.New(rand.NewPCG(cfg.Seed, uint64(epoch)+2)).Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		return pack(order, lengths, cfg.MaxLength, cfg.BatchTokens)
	}
	total := 0
	for e := 0; e < cfg.Epochs; e++ {
		total += len(epochBatches(e))
	}
	sched := optim.Schedule{Base: cfg.LR, MinRatio: cfg.MinLRRatio, Warmup: int(math.Ceil(cfg.WarmupFrac * float64(total))), Total: total}
	evalBatches := pack(evalIdx, lengths, cfg.MaxLength, cfg.BatchTokens)

	ckpt := filepath.Join(out, "checkpoint.safetensors")
	st := &optim.TrainState{Buffers: []optim.Param{{Name: "best", Data: best}}}
	extra := trainExtra{Best: math.Inf(1)}
	if cfg.Resume {
		if _, err := os.Stat(ckpt); err == nil {
			if err := optim.LoadCheckpoint(ckpt, opt, st); err != nil {
				return nil, err
			}
			if err := json.Unmarshal(st.Extra, &extra); err != nil {
				return nil, fmt.Errorf("eagle3: checkpoint %s: decoding trainer state: %w", ckpt, err)
			}
		}
	}
	metrics, err := os.OpenFile(filepath.Join(out, "metrics.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("eagle3: %w", err)
	}
	defer metrics.Close()
	logLine := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = metrics.Write(append(b, '\n'))
		return err
	}
	save := func() error {
		b, err := json.Marshal(extra)
		if err != nil {
			return err
		}
		st.Extra = b
		return optim.SaveCheckpoint(ckpt, opt, st)
	}

	start := time.Now()
	flopsTok := FLOPsPerToken(g, cfg.Steps)
	for epoch := st.Epoch; epoch < cfg.Epochs && !extra.Done; epoch++ {
		batches := epochBatches(epoch)
		for bi := st.Cursor; bi < len(batches); bi++ {
			if err := ctx.Err(); err != nil {
				st.Epoch, st.Cursor = epoch, bi
				if serr := save(); serr != nil {
					return nil, serr
				}
				return nil, err
			}
			t0 := time.Now()
			if err := fillBatch(n, ds, batches[bi]); err != nil {
				return nil, err
			}
			opt.ZeroGrad()
			loss := n.forward(true)
			n.backward()
			gnorm := optim.ClipGradNorm(params, cfg.ClipNorm)
			step := int(opt.StepCount)
			lr := sched.LR(step)
			opt.Step(lr)
			extra.LossSum += loss
			extra.LossCount++
			dt := time.Since(t0).Seconds()
			tps := float64(n.rows) / dt
			if (step+1)%cfg.LogEvery == 0 {
				acc := make([]float64, cfg.Steps)
				for k := range acc {
					acc[k] = ratio(n.correctK[k], n.maskedK[k])
				}
				if err := logLine(map[string]any{"kind": "train", "epoch": epoch, "step": step + 1, "loss": loss, "lr": lr,
					"grad_norm": gnorm, "accuracy": acc, "tokens": n.rows, "tokens_per_s": tps, "gflops": flopsTok * tps / 1e9}); err != nil {
					return nil, fmt.Errorf("eagle3: writing metrics: %w", err)
				}
			}
			if cfg.Progress != nil {
				cfg.Progress(Progress{Epoch: epoch, Step: step + 1, TotalSteps: total, Loss: loss, LR: lr, TokensPerSec: tps})
			}
			if cfg.CheckpointEvery > 0 && (step+1)%cfg.CheckpointEvery == 0 {
				st.Epoch, st.Cursor = epoch, bi+1
				if err := save(); err != nil {
					return nil, err
				}
			}
		}
		em, err := evaluate(n, ds, evalBatches)
		if err != nil {
			return nil, err
		}
		em.Epoch, em.Step, em.ElapsedSec = epoch+1, int(opt.StepCount), time.Since(start).Seconds()
		if extra.LossCount > 0 {
			em.TrainLoss = extra.LossSum / float64(extra.LossCount)
		}
		extra.LossSum, extra.LossCount = 0, 0
		if em.Loss < extra.Best {
			extra.Best, extra.Bad = em.Loss, 0
			em.BestSoFar = true
			copy(best, p.All)
			extra.BestEval = em
		} else {
			extra.Bad++
			if cfg.Patience > 0 && extra.Bad >= cfg.Patience {
				extra.Done = true
			}
		}
		if err := logLine(map[string]any{"kind": "eval", "epoch": em.Epoch, "step": em.Step, "loss": em.Loss, "step_loss": em.StepLoss,
			"accuracy": em.Accuracy, "accept_length": em.AcceptLen, "train_loss": em.TrainLoss, "best": em.BestSoFar, "elapsed_s": em.ElapsedSec}); err != nil {
			return nil, fmt.Errorf("eagle3: writing metrics: %w", err)
		}
		if cfg.Progress != nil {
			e := em
			cfg.Progress(Progress{Epoch: epoch, Step: int(opt.StepCount), TotalSteps: total, Loss: em.Loss, LR: sched.LR(int(opt.StepCount)), Eval: &e})
		}
		st.Epoch, st.Cursor = epoch+1, 0
		if err := save(); err != nil {
			return nil, err
		}
	}

	copy(p.All, best)
	res := &Result{Best: extra.BestEval, Steps: int(opt.StepCount), Epochs: st.Epoch, Vocab: voc, Geometry: g, ExportDir: filepath.Join(out, "eagle3")}
	dj := map[string]any{}
	for k, v := range cfg.Drafter {
		dj[k] = v
	}
	dj["method"] = "eagle3"
	dj["final_metrics"] = extra.BestEval
	dj["draft_vocab_size"] = g.DraftVocab
	dj["ttt_steps"] = cfg.Steps
	eo := cfg.Export
	eo.Drafter = dj
	if err := Export(res.ExportDir, g, p, voc, eo); err != nil {
		return nil, err
	}
	return res, nil
}

// pack splits samples (in the given order) into batches of at most batch
// tokens, each sample counted at its truncated length; samples shorter than 3
// tokens (no position with a target) are skipped.
func pack(order, lengths []int, maxLen, batch int) [][]int {
	var out [][]int
	var cur []int
	used := 0
	for _, i := range order {
		n := min(lengths[i], maxLen)
		if n < 3 {
			continue
		}
		if used+n > batch && len(cur) > 0 {
			out = append(out, cur)
			cur, used = nil, 0
		}
		cur = append(cur, i)
		used += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

func fillBatch(n *net, ds Dataset, idx []int) error {
	n.begin()
	for _, i := range idx {
		s, err := ds.Sample(i)
		if err != nil {
			return fmt.Errorf("eagle3: reading sample %d: %w", i, err)
		}
		if err := n.add(s); err != nil {
			return fmt.Errorf("eagle3: sample %d: %w", i, err)
		}
	}
	n.finish()
	return nil
}

// evaluate runs the held-out batches without gradients.
func evaluate(n *net, ds Dataset, batches [][]int) (EvalMetrics, error) {
	T := n.steps
	lossSum := make([]float64, T)
	count, correct, masked := make([]int, T), make([]int, T), make([]int, T)
	tokens := 0
	for _, b := range batches {
		if err := fillBatch(n, ds, b); err != nil {
			return EvalMetrics{}, err
		}
		n.forward(false)
		tokens += n.rows
		for k := 0; k < T; k++ {
			lossSum[k] += n.lossK[k] * float64(n.countK[k])
			count[k] += n.countK[k]
			correct[k] += n.correctK[k]
			masked[k] += n.maskedK[k]
		}
	}
	em := EvalMetrics{StepLoss: make([]float64, T), Accuracy: make([]float64, T), Tokens: tokens, AcceptLen: 1}
	prod := 1.0
	for k := 0; k < T; k++ {
		if count[k] > 0 {
			em.StepLoss[k] = lossSum[k] / float64(count[k])
		}
		em.Loss += math.Pow(n.decay, float64(k)) * em.StepLoss[k]
		em.Accuracy[k] = ratio(correct[k], masked[k])
		prod *= em.Accuracy[k]
		em.AcceptLen += prod
	}
	return em, nil
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func countInto(counts []int64, s *Sample, i int) error {
	if len(s.LossMask) != len(s.Tokens) {
		return fmt.Errorf("eagle3: sample %d has %d tokens but %d loss-mask entries", i, len(s.Tokens), len(s.LossMask))
	}
	for j, t := range s.Tokens {
		if t < 0 || int(t) >= len(counts) {
			return fmt.Errorf("eagle3: sample %d token %d is id %d, outside the target vocabulary [0, %d)", i, j, t, len(counts))
		}
		if s.LossMask[j] {
			counts[t]++
		}
	}
	return nil
}
