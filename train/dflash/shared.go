package dflash

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	ddflash "github.com/drafter-ai/drafter/pkg/drafters/dflash"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/dataset"
	"github.com/drafter-ai/drafter/train/loop"
	"github.com/drafter-ai/drafter/train/optim"
)

// This file holds what the block trainers (this package's and
// train/dspark's, which trains DFlash's backbone under other heads and
// labels) share, so that both read, split, order and initialise alike. Its
// errors name no method: each trainer prefixes its own.

// CheckInputs checks that the dataset's hidden states and the target's
// embedding and lm_head (embed, lmHead) fit the target's config c, and that
// the dataset holds at least 2 samples (one is held out).
func CheckInputs(c *checkpoint.Config, ds dataset.Dataset, embed, lmHead []float32) error {
	if ds.Hidden() != c.HiddenSize {
		return fmt.Errorf("the dataset's hidden states have width %d, the target's hidden_size is %d", ds.Hidden(), c.HiddenSize)
	}
	if len(embed) != c.VocabSize*c.HiddenSize || len(lmHead) != c.VocabSize*c.HiddenSize {
		return fmt.Errorf("target embedding has %d values and lm_head %d, want vocab %d x hidden %d each", len(embed), len(lmHead), c.VocabSize, c.HiddenSize)
	}
	if ds.NumSamples() < 2 {
		return fmt.Errorf("need at least 2 samples (one held out), got %d", ds.NumSamples())
	}
	return nil
}

// Schedule is a block trainer's order of samples: the held-out split, each
// epoch's seeded shuffle and the cursor within it, and the random streams
// the anchors are drawn from, so that a resumed run reads and draws what an
// uninterrupted one would. A trainer embeds it for loop.Trainer's Plan, Seek
// and Position.
type Schedule struct {
	tr Training
	// TrainIdx and EvalIdx are the training and held-out samples,
	// ascending.
	TrainIdx, EvalIdx []int
	epochSteps        []int
	order             []int
	epoch, cursor     int
}

// NewSchedule splits n samples (at least 2) by tr's seed, holding out
// tr.EvalFraction of them (at least one, at most n-1), for tr.Epochs epochs
// of ceil(train/BatchSeqs) updates.
func NewSchedule(tr Training, n int) *Schedule {
	s := &Schedule{tr: tr}
	perm := rand.New(rand.NewPCG(tr.Seed, 1)).Perm(n)
	nEval := min(max(1, int(math.Round(tr.EvalFraction*float64(n)))), n-1)
	s.EvalIdx, s.TrainIdx = append([]int(nil), perm[:nEval]...), append([]int(nil), perm[nEval:]...)
	sort.Ints(s.EvalIdx)
	sort.Ints(s.TrainIdx)
	steps := (len(s.TrainIdx) + tr.BatchSeqs - 1) / tr.BatchSeqs
	for range tr.Epochs {
		s.epochSteps = append(s.epochSteps, steps)
	}
	return s
}

// Plan: Epochs epochs of ceil(train/BatchSeqs) updates, WarmupFrac warm-up.
func (s *Schedule) Plan() loop.Plan {
	total := 0
	for _, n := range s.epochSteps {
		total += n
	}
	return loop.Plan{EpochSteps: s.epochSteps, Warmup: int(math.Ceil(s.tr.WarmupFrac * float64(total))), HeldOut: true,
		AdamW: optim.AdamWConfig{Beta1: 0.9, Beta2: s.tr.Beta2, Eps: 1e-8, WeightDecay: s.tr.WeightDecay}}
}

// Seek shuffles epoch's order (seeded) and starts at update pos.Cursor.
func (s *Schedule) Seek(epoch int, pos loop.Position) error {
	s.order = append(s.order[:0], s.TrainIdx...)
	rand.New(rand.NewPCG(s.tr.Seed, uint64(epoch)+2)).Shuffle(len(s.order), func(a, b int) { s.order[a], s.order[b] = s.order[b], s.order[a] })
	s.epoch, s.cursor = epoch, pos.Cursor
	return nil
}

// Position is the update after the one read.
func (s *Schedule) Position() loop.Position { return loop.Position{Cursor: s.cursor} }

// NextBatch calls read on each sample of the next update with the random
// stream its anchors are drawn from, and moves past it; false when the
// epoch is done. The stream comes from the seed, the epoch and the sample,
// so that a resumed run draws the same anchors.
func (s *Schedule) NextBatch(read func(i int, rng *rand.Rand) error) (bool, error) {
	lo := s.cursor * s.tr.BatchSeqs
	if lo >= len(s.order) {
		return false, nil
	}
	hi := min(lo+s.tr.BatchSeqs, len(s.order))
	for _, i := range s.order[lo:hi] {
		if err := read(i, rand.New(rand.NewPCG(s.tr.Seed^0xa1c4, uint64(s.epoch)<<32|uint64(i)))); err != nil {
			return false, err
		}
	}
	s.cursor++
	return true, nil
}

// EvalRand is the random stream of held-out sample i's anchors: fixed, so
// that every evaluation draws the same blocks.
func (s *Schedule) EvalRand(i int) *rand.Rand {
	return rand.New(rand.NewPCG(s.tr.Seed^0xe7a1, uint64(i)))
}

// LeastFrequent returns the least frequent token of the samples idx of ds,
// the lowest id on ties: an id that (almost) never appears, whose embedding
// row the mask slots can own. Both methods choose their mask token by it,
// so that they choose the same one on the same data.
func LeastFrequent(ds dataset.Dataset, idx []int, V int) (int, error) {
	counts := make([]int64, V)
	var s dataset.Sample
	for _, i := range idx {
		if err := ds.Sample(i, &s, dataset.TokensOnly); err != nil {
			return 0, fmt.Errorf("reading sample %d: %w", i, err)
		}
		for _, tok := range s.Tokens {
			if tok < 0 || int(tok) >= V {
				return 0, fmt.Errorf("sample %d holds token %d outside the vocabulary [0, %d)", i, tok, V)
			}
			counts[tok]++
		}
	}
	best := 0
	for v, n := range counts {
		if n < counts[best] {
			best = v
		}
	}
	return best, nil
}

// InitBackbone sets the backbone's norms to one and its matrices to
// N(0, 0.02²) drawn from r, as Transformers initialises a Qwen3 model. r is
// the caller's, so that a trainer with more weights goes on drawing them
// from the same stream.
func InitBackbone(w *ddflash.Weights[float32], g ddflash.Geometry, r *rand.Rand) {
	for _, t := range w.Tensors(g) {
		if len(t.Shape) == 1 {
			for i := range t.Data {
				t.Data[i] = 1
			}
			continue
		}
		for i := range t.Data {
			t.Data[i] = float32(r.NormFloat64() * 0.02)
		}
	}
}

// NewParam uploads weight w and its gradient g, of shape [n] or
// [rows, cols], to dev as the optimiser's parameter name.
func NewParam(dev tensor.Device, name string, shape []int, w, g []float32) (optim.Param, error) {
	rows, cols := 1, shape[0]
	if len(shape) == 2 {
		rows, cols = shape[0], shape[1]
	}
	d, err := dev.Upload(tensor.F32Matrix(w, rows, cols))
	if err != nil {
		return optim.Param{}, fmt.Errorf("%s: %w", name, err)
	}
	gr, err := dev.Upload(tensor.F32Matrix(g, rows, cols))
	if err != nil {
		return optim.Param{}, fmt.Errorf("%s: %w", name, err)
	}
	return optim.Param{Name: name, Data: d, Grad: gr}, nil
}

// BackboneParams are the backbone's weights w and gradients gw on dev, in
// the order of Weights.Tensors.
func BackboneParams(dev tensor.Device, g ddflash.Geometry, w, gw *ddflash.Weights[float32]) ([]optim.Param, error) {
	var params []optim.Param
	grads := gw.Tensors(g)
	for i, t := range w.Tensors(g) {
		p, err := NewParam(dev, t.Name, t.Shape, t.Data, grads[i].Data)
		if err != nil {
			return nil, err
		}
		params = append(params, p)
	}
	return params, nil
}

// ReadSample reads sample i of ds into s (fields, Features among them) and
// checks it: that it holds features feature layers and that its first
// maxLength tokens lie in the vocabulary [0, vocab). It returns how many
// tokens are trained on, min(len(s.Tokens), maxLength).
func ReadSample(ds dataset.Dataset, i int, s *dataset.Sample, fields dataset.Fields, features, vocab, maxLength int) (int, error) {
	if err := ds.Sample(i, s, fields); err != nil {
		return 0, fmt.Errorf("reading sample %d: %w", i, err)
	}
	if len(s.Features) != features {
		return 0, fmt.Errorf("sample %d holds %d feature layers, the draft fuses %d", i, len(s.Features), features)
	}
	T := min(len(s.Tokens), maxLength)
	for _, tok := range s.Tokens[:T] {
		if tok < 0 || int(tok) >= vocab {
			return 0, fmt.Errorf("sample %d holds token %d outside the vocabulary [0, %d)", i, tok, vocab)
		}
	}
	return T, nil
}

// ContextRows lays out the context a sequence's blocks attend to: rows
// 0..S-1 (S the last anchor: it sees those) of the sample's feature layers
// (T tokens of width H each), fused as [S, F*H], and their positions.
func ContextRows(features [][]float32, T, S, H int) (feat []float32, pos []int, err error) {
	F := len(features)
	feat, pos = make([]float32, S*F*H), make([]int, S)
	for c, f := range features {
		if len(f) < T*H {
			return nil, nil, fmt.Errorf("feature layer %d holds %d values for %d tokens of width %d", c, len(f), T, H)
		}
		for j := range S {
			copy(feat[(j*F+c)*H:(j*F+c+1)*H], f[j*H:(j+1)*H])
		}
	}
	for j := range S {
		pos[j] = j
	}
	return feat, pos, nil
}

// AnchorCandidates appends to dst the positions p >= first of a sequence
// with loss mask lossMask that may anchor a block: p+1 < n and both p and
// p+1 are response tokens (the anchor itself and its first label). DFlash
// leaves position 0 out (first 1: it has no context before it); DSpark
// takes it as DeepSpec's build_anchor_candidate_mask does (first 0).
func AnchorCandidates(dst []int, lossMask []bool, first int) []int {
	for p := first; p+1 < len(lossMask); p++ {
		if lossMask[p] && lossMask[p+1] {
			dst = append(dst, p)
		}
	}
	return dst
}

// SetupInputs are the inputs of a run set up by drafter train (s), fusing
// layers, and its job, which records layers as the run's feature layers.
func SetupInputs(s *loop.Setup, layers []int) (Inputs, loop.Job, error) {
	embed, lmHead, err := s.OutputLayers(true)
	if err != nil {
		return Inputs{}, loop.Job{}, err
	}
	job := s.Job
	if job.Settings != nil {
		job.Settings.FeatureLayers = layers
	}
	in := Inputs{Config: s.Target.Config, Layers: layers, Embed: embed, LMHead: lmHead, Data: s.Data, Resume: s.Resume,
		TargetName: s.Target.Name()}
	return in, job, nil
}

// Outcome is what drafter train reports of a block trainer's run r, which
// exported into exportDir; result is the trainer's own result.
func Outcome[M any](r *loop.Result[M], exportDir string, result any) *loop.Outcome {
	return &loop.Outcome{Steps: r.Steps, Epochs: r.Epochs, Stopped: r.Stopped, Exports: []string{exportDir}, Result: result}
}

// EvalStamp says when a block trainer's evaluation ran: the epoch
// (1-based), the step, the seconds since the run started and the training
// loss then. Both EvalMetrics embed it first, so that its fields keep their
// JSON keys and their place in metrics and checkpoints.
type EvalStamp struct {
	Epoch      int     `json:"epoch"`
	Step       int     `json:"step"`
	ElapsedSec float64 `json:"elapsed_s"`
	TrainLoss  float64 `json:"train_loss"`
}

// NewEvalStamp is the stamp of the loop's evaluation e.
func NewEvalStamp(e loop.Eval) EvalStamp {
	return EvalStamp{Epoch: e.Epoch + 1, Step: e.Step, ElapsedSec: e.Elapsed.Seconds(), TrainLoss: e.TrainLoss}
}

// Columns are the columns of a block trainer's run on target c: the fused
// feature layers (featureLayers of c's layer count) once validate passes;
// fromFlag says they were given (--layers).
func Columns(c *checkpoint.Config, validate func() error, featureLayers func(L int) ([]int, error), fromFlag bool) (loop.Columns, error) {
	if err := validate(); err != nil {
		return loop.Columns{}, err
	}
	layers, err := featureLayers(c.NumLayers)
	if err != nil {
		return loop.Columns{}, err
	}
	return loop.Columns{FeatureLayers: layers, FromFlag: fromFlag}, nil
}

// TrainLine is a step's metrics.jsonl line with the slot accuracies
// correct[k]/counted[k].
func TrainLine(s loop.StepStats, correct, counted []int) any {
	acc := make([]float64, len(correct))
	for k := range acc {
		if counted[k] > 0 {
			acc[k] = float64(correct[k]) / float64(counted[k])
		}
	}
	return map[string]any{"kind": "train", "epoch": s.Epoch, "step": s.Step, "loss": s.Loss, "lr": s.LR,
		"grad_norm": s.GradNorm, "accuracy": acc, "tokens": s.Tokens, "tokens_per_s": float64(s.Tokens) / s.Took.Seconds()}
}
