// Package distill self-distils a target checkpoint: it answers a prompt set
// with the frozen model at its serving settings and captures, from the very
// forward passes that generate each token, the hidden states a drafter trains
// on (Run, `drafter distill`). Capture (`drafter capture`) stores the same
// shards for responses that already exist, with one teacher-forced prefill per
// sample.
//
// # Output directory
//
//	responses.jsonl     one line per sample, in sample order (Response)
//	manifest.json       the capture manifest (package capture)
//	shard-NNNNN.arrow   the hidden states, one row per position
//	generated.jsonl     with --generator: every answer the serving engines
//	                    gave, as it arrived (remote.go)
//	.drafter.lock       while a run writes here (package outlock): a second
//	                    run into the same directory is refused
//
// # Samples and randomness
//
// Prompt i (0-based among the valid records of the prompt file) yields
// samples i*S .. i*S+S-1 for S = --samples-per-prompt; the sample index is the
// sample_id in the shards and the id in responses.jsonl. Sample j draws its
// tokens from the random stream (seed, j) and nothing else, so its tokens do
// not depend on the batch size, on --shard or on restarts. With --shard i/n a
// run takes the prompts whose index is i modulo n. Where the device draws the
// tokens itself (greedy, or temperature alone: generate.Engine), each draw's
// uniform still comes from the stream (seed, j), one per token as pkg/sample
// draws it: the CPU device's tokens are pkg/sample's bit for bit, a GPU's at
// temperature 0 too.
//
// # Captured positions
//
// The states of the prompt come from the prefill pass, the state of each
// generated token from the decode step that consumed it. The last generated
// token (the eos, or the last token when the budget ran out) is consumed by no
// generating pass; it is run once more as a capture-only row (no logits) in
// the next batched pass, so every stored position has its state and the stop
// token is in the data, a drafter must learn to predict it.
//
// # Determinism and resume
//
// A row's floating-point result can depend, in the last bits, on the other
// rows of its pass (the matrix-multiply kernels block differently for
// different row counts). So that a restarted run reproduces an uninterrupted
// one bit for bit, samples are generated in blocks of 64*batch consecutive
// samples of the run's sample list; each block is scheduled on its own (slots
// refilled from the block only), so the composition of every pass depends on
// the block and --batch alone. Resume restarts at the block holding the first
// sample not yet stored, regenerating (and discarding) the block's already
// stored samples. Changing --batch is therefore a changed argument. Across
// different --batch values or --shard splits the tokens are the same and the
// states agree to rounding, but the bytes can differ.
//
// responses.jsonl is appended before each sample goes to the shard writer and
// fsynced when a shard is finished; on resume (and on an interrupted run) it
// is truncated to the samples the manifest lists.
package distill

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/data"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/completions"
	"github.com/drafter-ai/drafter/pkg/drafters/methods"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/outlock"
	"github.com/drafter-ai/drafter/pkg/target"
)

// ResponsesName is the responses file inside the output directory.
const ResponsesName = "responses.jsonl"

// blockPerBatch sets the scheduling block: 64 samples per batch slot.
const blockPerBatch = 64

// Options configure Run.
type Options struct {
	// Prompts is the prompt file (data.ReadPrompts formats); Out the output
	// directory.
	Prompts, Out string
	// SkipInvalid skips malformed records, and prompts that leave no room
	// to generate, counting them.
	SkipInvalid bool
	// Sampling overrides generation_config.json.
	Sampling generate.Overrides
	// SamplesPerPrompt is the number of samples per prompt (default 1).
	SamplesPerPrompt int
	// Seed keys every sample's random stream.
	Seed uint64
	// Batch is the number of sequences decoded together (default 1). On a
	// device with memory of its own (tensor.MemoryReporter: a GPU) the
	// batch's KV caches must fit its free memory after the weights, less a
	// reserve (batchMemory), or Run refuses it naming --batch.
	Batch int
	// AutoBatch, on a device with memory of its own, chooses the batch from
	// the free memory instead of Batch (at most maxAutoBatch, at most the
	// run's samples); a resumed run keeps the batch its manifest records,
	// which the block schedule depends on. Elsewhere Batch applies.
	AutoBatch bool
	// Layers are the Hugging Face hidden_states indices to store (see
	// capture.LayerConvention: index L is the last layer's output BEFORE
	// the final norm); nil means every drafter method's default layers
	// (methods.DefaultLayers). The state after the final norm is always
	// stored as final_norm.
	Layers []int
	// DType is the storage type (default float16).
	DType capture.DType
	// Shard and NumShards select prompts with index % NumShards == Shard
	// (NumShards 0 or 1: all).
	Shard, NumShards int
	// ShardRows closes a shard once it holds this many rows (0: no row
	// limit); ShardBytes once it holds this many bytes (0: the capture
	// default of 1 GiB).
	ShardRows, ShardBytes int64
	// Force deletes an existing capture in Out and starts over.
	Force bool
	// Progress receives a progress bar and the summary; nil for none.
	Progress io.Writer
	// Notes receives what a run must say even without progress (--quiet):
	// a --generator server left out because it does not answer, taken in
	// later or unfit for the run, and the servers' warnings. nil: Progress.
	Notes io.Writer
	// Generator, when set, has serving engines generate the responses, which
	// are then captured with teacher-forced prefills (remote.go); nil
	// generates them with the target itself.
	Generator *completions.Options
}

// Response is one line of responses.jsonl.
type Response struct {
	// ID is the sample index (the shards' sample_id).
	ID int64 `json:"id"`
	// PromptIndex is the prompt's index among the valid records; Sample is
	// k in 0..samples_per_prompt-1; PromptLine the prompt's line in the file.
	PromptIndex int `json:"prompt_index"`
	Sample      int `json:"sample"`
	PromptLine  int `json:"prompt_line"`
	// PromptID is the record's own "id", when it has one.
	PromptID string `json:"prompt_id,omitempty"`
	// Prompt is a raw-text prompt; Messages a chat prompt followed by the
	// generated assistant turn (so the file reads back as conversations).
	Prompt   string    `json:"prompt,omitempty"`
	Messages []Message `json:"messages,omitempty"`
	// Response is the generated text (special tokens left out);
	// ResponseIDs the generated ids, ending with the stop id for "eos".
	Response    string `json:"response"`
	ResponseIDs []int  `json:"response_ids"`
	// FinishReason is "eos" (a stop id was generated) or "length".
	FinishReason string `json:"finish_reason"`
}

// Summary reports a run.
type Summary struct {
	Out string `json:"out"`
	// Prompts read, Skipped malformed records, TooLong prompts skipped for
	// leaving no room to generate.
	Prompts, Skipped, TooLong int
	// Samples in this run's share; Resumed of them were already stored;
	// Rejected were skipped because a server's answer could not be turned
	// into token ids (remote generation only).
	Samples, Resumed, Rejected int
	// Generated tokens in this run (including regenerated ones on resume).
	Generated int64
	// Seconds of the whole run; CaptureSeconds of them spent copying
	// states and writing shards.
	Seconds, CaptureSeconds float64
	// Manifest is the final manifest.
	Manifest *capture.Manifest
	// Settings are the generation settings used.
	Settings generate.Settings
}

// TokensPerSecond is generated tokens per second of the run.
func (s *Summary) TokensPerSecond() float64 {
	if s.Seconds == 0 {
		return 0
	}
	return float64(s.Generated) / s.Seconds
}

// CaptureShare is the fraction of the run spent on capture.
func (s *Summary) CaptureShare() float64 {
	if s.Seconds == 0 {
		return 0
	}
	return s.CaptureSeconds / s.Seconds
}

// Message is one chat turn in responses.jsonl, in the OpenAI layout (tool
// calls and extra fields of the prompt's turns are not repeated here).
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	Name    string `json:"name,omitempty"`
}

// item is one sample of the run.
type item struct {
	id     int64
	k      int
	prompt *data.Prompt
	ids    []int
	budget int
}

// Layers resolves the layers to store for a target of config c and L
// layers: when layers is nil, every drafter method's default layers
// (methods.DefaultLayers), so that the capture trains each method as it
// defaults; else layers sorted and deduplicated. Every index must be in 0..L.
func Layers(c *checkpoint.Config, L int, layers []int) ([]int, error) {
	if layers == nil {
		def, err := methods.DefaultLayers(c)
		if err != nil {
			return nil, err
		}
		layers = def
	}
	out := slices.Clone(layers)
	sort.Ints(out)
	out = slices.Compact(out)
	for _, k := range out {
		if k < 0 || k > L {
			return nil, fmt.Errorf("layer %d is not a hidden_states index of a %d-layer model (0..%d)", k, L, L)
		}
	}
	return out, nil
}

// Taps maps stored layers (Layers) to the model taps a run captures: index L is stored pre-norm
// (capture's convention), and final_norm (the model's index L) comes last.
func Taps(layers []int, L int) []int {
	t := make([]int, 0, len(layers)+1)
	for _, k := range layers {
		if k == L {
			t = append(t, model.PreNormLast)
		} else {
			t = append(t, k)
		}
	}
	return append(t, L)
}

// Run distils the prompts of opt.Prompts with t into opt.Out, resuming an
// interrupted run with the same arguments. The output folder's lock is held
// for the whole run, whoever generates.
func Run(ctx context.Context, t *target.Target, opt Options) (*Summary, error) {
	start := time.Now()
	if err := opt.check(); err != nil {
		return nil, err
	}
	lock, err := outlock.Acquire(opt.Out, "drafter distill")
	if err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	defer lock.Release()
	p, err := prepare(t, &opt)
	if err != nil {
		return nil, err
	}
	if opt.Generator != nil {
		return runRemote(ctx, t, opt, p, start)
	}
	return runLocal(ctx, t, opt, p, start)
}

// check fills opt's defaults and checks it.
func (opt *Options) check() error {
	if opt.SamplesPerPrompt == 0 {
		opt.SamplesPerPrompt = 1
	}
	if opt.Batch == 0 {
		opt.Batch = 1
	}
	if opt.DType == "" {
		opt.DType = capture.Float16
	}
	if opt.NumShards == 0 && opt.Shard == 0 {
		opt.NumShards = 1 // all prompts; a Shard without NumShards is refused below as given
	}
	switch {
	case opt.SamplesPerPrompt < 1:
		return fmt.Errorf("distill: --samples-per-prompt %d: want at least 1", opt.SamplesPerPrompt)
	case opt.Batch < 1:
		return fmt.Errorf("distill: --batch %d: want at least 1", opt.Batch)
	case opt.Shard < 0 || opt.Shard >= opt.NumShards:
		return fmt.Errorf("distill: --shard %d/%d: want i/n with n >= 1 and 0 <= i < n", opt.Shard, opt.NumShards)
	case opt.Out == "":
		return fmt.Errorf("distill: no output directory")
	}
	return nil
}

// plan is what a run resolved before generating: the settings, the samples of
// its share and the manifest that describes it.
type plan struct {
	layers   []int
	settings generate.Settings
	items    []item
	capacity int
	sum      *Summary
	man      capture.Manifest
}

// prepare reads the prompts and builds the run's sample list and manifest.
func prepare(t *target.Target, opt *Options) (*plan, error) {
	layers, err := Layers(t.Config, t.Model.NumLayers(), opt.Layers)
	if err != nil {
		return nil, fmt.Errorf("distill: --layers: %w", err)
	}
	st, err := generate.Resolve(t, opt.Sampling)
	if err != nil {
		return nil, err
	}
	prompts, skipped, err := data.ReadPrompts(opt.Prompts, data.ReadOptions{SkipInvalid: opt.SkipInvalid})
	if err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	if len(prompts) == 0 {
		if skipped > 0 {
			return nil, fmt.Errorf("distill: %s holds no valid prompt: all %d records are malformed (--skip-invalid skipped them)", opt.Prompts, skipped)
		}
		return nil, fmt.Errorf("distill: %s holds no prompts", opt.Prompts)
	}
	promptHash, err := data.PromptHash(opt.Prompts)
	if err != nil {
		return nil, err
	}
	sum := &Summary{Out: opt.Out, Prompts: len(prompts), Skipped: skipped, Settings: st}
	items, capacity, err := sampleList(t, opt, prompts, st, sum)
	if err != nil {
		return nil, err
	}
	if opt.Generator == nil {
		if err := chooseBatch(t, opt, capacity, len(items)); err != nil {
			return nil, err
		}
	}
	man, err := runManifest(t, opt, layers, st, promptHash)
	if err != nil {
		return nil, err
	}
	return &plan{layers: layers, settings: st, items: items, capacity: capacity, sum: sum, man: man}, nil
}

// sampleList builds the samples of this run's share of prompts, with the
// sequence capacity the longest needs; a prompt that cannot be encoded or
// leaves no room to generate stops the run unless --skip-invalid counts it
// in sum.
func sampleList(t *target.Target, opt *Options, prompts []data.Prompt, st generate.Settings, sum *Summary) ([]item, int, error) {
	m := t.Model
	var items []item
	capacity := 2
	for i := range prompts {
		p := &prompts[i]
		if p.Index%opt.NumShards != opt.Shard {
			continue
		}
		ids, err := data.Encode(*p, t.Tok, t.Template)
		if err == nil {
			var b int
			b, err = st.Budget(len(ids), m.MaxPositions())
			if err == nil {
				capacity = max(capacity, len(ids)+b)
				for k := 0; k < opt.SamplesPerPrompt; k++ {
					items = append(items, item{id: int64(p.Index*opt.SamplesPerPrompt + k), k: k, prompt: p, ids: ids, budget: b})
				}
				continue
			}
		}
		if !opt.SkipInvalid || strings.Contains(err.Error(), "no chat template") {
			return nil, 0, fmt.Errorf("distill: %s:%d: %w (--skip-invalid skips such prompts)", opt.Prompts, p.Line, err)
		}
		sum.TooLong++
	}
	sum.Samples = len(items)
	if len(items) == 0 {
		return nil, 0, noSampleToGenerate(opt, prompts, sum, m.MaxPositions())
	}
	return items, capacity, nil
}

// runManifest is the manifest of a run: the stored layout, the generation
// settings and every argument a resume must repeat.
func runManifest(t *target.Target, opt *Options, layers []int, st generate.Settings, promptHash string) (capture.Manifest, error) {
	m := t.Model
	layout := capture.Layout{Layers: layers, FinalNorm: true, Hidden: m.HiddenSize(), DType: opt.DType}
	if err := layout.Validate(); err != nil {
		return capture.Manifest{}, fmt.Errorf("distill: %w", err)
	}
	genDesc := map[string]any{
		"temperature": st.Params.Temperature, "top_p": st.Params.TopP, "top_k": st.Params.TopK, "min_p": st.Params.MinP,
		"max_new_tokens": st.MaxNewTokens, "max_length": st.MaxLength, "samples_per_prompt": opt.SamplesPerPrompt,
		"stop_ids": t.Stop, "decoding": st.Params.String(),
	}
	args := map[string]string{
		"command":            "distill",
		"model_fingerprint":  t.Fingerprint,
		"tokenizer_hash":     t.TokenizerHash,
		"chat_template_hash": t.TemplateHash(),
		"prompt_file_hash":   promptHash,
		"skip_invalid":       strconv.FormatBool(opt.SkipInvalid),
		"sampling":           fmt.Sprintf("temperature=%g top_p=%g top_k=%d min_p=%g", st.Params.Temperature, st.Params.TopP, st.Params.TopK, st.Params.MinP),
		"max_new_tokens":     strconv.Itoa(st.MaxNewTokens),
		"max_length":         strconv.Itoa(st.MaxLength),
		"samples_per_prompt": strconv.Itoa(opt.SamplesPerPrompt),
		"seed":               strconv.FormatUint(opt.Seed, 10),
		"batch":              strconv.Itoa(opt.Batch),
		"layers":             fmt.Sprint(layers),
		"dtype":              string(opt.DType),
		"shard":              fmt.Sprintf("%d/%d", opt.Shard, opt.NumShards),
		"shard_rows":         strconv.FormatInt(opt.ShardRows, 10),
		"shard_bytes":        strconv.FormatInt(opt.ShardBytes, 10),
	}
	man := capture.Manifest{
		ModelFingerprint: t.Fingerprint, Layers: layers, FinalNorm: true, DType: opt.DType, HiddenSize: m.HiddenSize(),
		TokenizerHash: t.TokenizerHash, ChatTemplateHash: t.TemplateHash(), Generation: genDesc, Seed: int64(opt.Seed),
		PromptFileHash: promptHash, Args: args, Serves: serves(t.Config, layers),
	}
	return man, nil
}

// serves names the methods a capture of layers and the final-norm state
// trains with their default settings.
func serves(c *checkpoint.Config, layers []int) []string {
	var out []string
	for _, k := range methods.Serves(c, layers, true) {
		out = append(out, string(k))
	}
	return out
}

// servesText lists the methods a capture serves for a report.
func servesText(s []string) string {
	if len(s) == 0 {
		return "no method with its default layers"
	}
	return strings.Join(s, ", ")
}

// noSampleToGenerate says why a run has no sample at all, which would leave
// an empty capture that trains nothing: the --shard takes none of the
// prompts, or --skip-invalid skipped every one of its share.
func noSampleToGenerate(opt *Options, prompts []data.Prompt, sum *Summary, context int) error {
	share := 0
	for i := range prompts {
		if prompts[i].Index%opt.NumShards == opt.Shard {
			share++
		}
	}
	if share == 0 {
		return fmt.Errorf("distill: no sample to generate: --shard %d/%d takes none of the %d prompts of %s (prompt i goes to the shard i modulo %d)",
			opt.Shard, opt.NumShards, len(prompts), opt.Prompts, opt.NumShards)
	}
	return fmt.Errorf("distill: no sample to generate: --skip-invalid skipped every prompt of %s in this run's share (%d malformed, %d too long to leave room to generate in the model's context of %d tokens)",
		opt.Prompts, sum.Skipped, sum.TooLong, context)
}

// canonical returns v as ReadManifest decodes it (JSON objects as maps,
// numbers as float64), so that a manifest marshals to the same bytes whether
// it was built by this run or read back by a resumed one: a struct's fields
// keep their declared order, a map's keys are sorted.
func canonical(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("distill: encoding the manifest's generation block: %w", err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("distill: decoding the manifest's generation block: %w", err)
	}
	return out, nil
}

// runLocal is Run generating with the target itself; p is what prepare
// resolved. Its steps: open (or resume) the output, start the session,
// generate and store block by block, then finish as a remote run does.
func runLocal(ctx context.Context, t *target.Target, opt Options, p *plan, start time.Time) (*Summary, error) {
	out, err := openLocalOutput(&opt, p)
	if err != nil {
		return nil, err
	}
	ses, err := startSession(out, &opt, len(p.items), nil)
	if err != nil {
		return nil, err
	}
	defer ses.resp.close()
	m := t.Model
	eng, err := generate.NewEngine(m, generate.EngineOptions{Params: p.settings.Params, Seed: opt.Seed, Stop: t.Stop,
		Batch: opt.Batch, Capacity: p.capacity, Taps: Taps(p.layers, m.NumLayers())})
	if err != nil {
		return nil, ses.fail(ctx, err)
	}
	defer eng.Close()
	if opt.Progress != nil {
		writeEngineLine(opt.Progress, eng)
	}
	g := &localGen{t: t, opt: &opt, items: p.items, done: p.sum.Resumed, ses: ses, eng: eng, start: start,
		bar: newBar(opt.Progress, "distill", len(p.items), p.sum.Resumed)}
	g.sw = startShardWriter(ses, opt.Prompts)
	err = g.run(ctx)
	if werr := g.sw.Close(); werr != nil && (err == nil || errors.Is(err, errWriterStopped)) {
		err = werr
	}
	stats := eng.Stats()
	p.sum.Generated = stats.Generated
	return ses.finish(ctx, &opt, p.sum, start, err, ending{bar: g.bar, writeTime: g.writeTime, compute: stats.Copy})
}

// openLocalOutput opens the output folder for a local run, new or resumed,
// and checks that what it stores is a prefix of this run's sample list: the
// block schedule restarts from the count of stored samples alone.
func openLocalOutput(opt *Options, p *plan) (*output, error) {
	items, man := p.items, p.man
	var err error
	if man.Generation, err = canonical(man.Generation); err != nil {
		return nil, err
	}
	out, err := openOutput(opt.Out, man, opt.Force)
	if err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	done := len(out.done)
	if done > len(items) {
		return nil, fmt.Errorf("distill: %s stores %d samples, more than this run's %d", opt.Out, done, len(items))
	}
	for i := 0; i < done; i++ {
		if _, ok := out.done[items[i].id]; !ok {
			return nil, fmt.Errorf("distill: %s does not store sample %d although it stores %d samples: the samples are not this run's first ones; start over with --force", opt.Out, items[i].id, done)
		}
	}
	p.sum.Resumed = done
	return out, nil
}

// localGen generates a local run's samples with the engine and stores each
// as it finishes; its buffers are reused from sample to sample.
type localGen struct {
	t     *target.Target
	opt   *Options
	items []item
	// done samples were stored before this run started.
	done  int
	ses   *session
	eng   *generate.Engine
	bar   *progressbar.ProgressBar
	start time.Time
	// writeTime is the time generation spent handing samples to sw (the
	// copy, and waiting when the writer is behind), which writes the
	// shards on a goroutine of its own.
	writeTime time.Duration
	sw        *shardWriter
}

// run generates the samples not yet stored in blocks of blockPerBatch*batch,
// from the block holding the first of them, so that every pass is composed
// as in an uninterrupted run.
func (g *localGen) run(ctx context.Context) error {
	items := g.items
	block := blockPerBatch * g.opt.Batch
	jobs := make([]generate.Job, 0, block)
	first := len(items) // nothing left to generate when all are stored
	if g.done < len(items) {
		first = g.done / block * block
	}
	for b0 := first; b0 < len(items); b0 += block {
		b1 := min(b0+block, len(items))
		jobs = jobs[:0]
		for _, it := range items[b0:b1] {
			jobs = append(jobs, generate.Job{Stream: uint64(it.id), Prompt: it.ids, MaxNew: it.budget})
		}
		err := g.eng.Run(ctx, jobs, func(d generate.Done) error { return g.store(b0+d.Job, d) })
		var je *generate.JobError
		if errors.As(err, &je) {
			err = promptError(g.opt.Prompts, &items[b0+je.Job], err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// store writes finished sample number k of the run (its response line, then
// its shard rows), skipping one stored before the restart: its block is
// regenerated only for an identical schedule.
func (g *localGen) store(k int, d generate.Done) error {
	if k < g.done {
		return nil
	}
	it := &g.items[k]
	t0 := time.Now()
	s, ok := g.sw.buffer()
	if !ok {
		return errWriterStopped // Close returns the writer's failure
	}
	s.it, s.resp = it, response(g.t, it, d)
	s.ids = append(s.ids[:0], d.Tokens...) // the engine reuses d.Tokens once store returns
	s.resp.ResponseIDs = s.ids
	s.tokens, s.mask = s.tokens[:0], s.mask[:0]
	for _, id := range it.ids {
		s.tokens = append(s.tokens, int32(id))
		s.mask = append(s.mask, false)
	}
	for _, id := range d.Tokens {
		s.tokens = append(s.tokens, int32(id))
		s.mask = append(s.mask, true)
	}
	if len(s.states) != len(d.States) {
		s.states = make([][]float32, len(d.States))
	}
	for i, st := range d.States {
		s.states[i] = append(s.states[i][:0], st...)
	}
	g.sw.in <- s
	g.writeTime += time.Since(t0)
	if g.bar != nil {
		el := time.Since(g.start).Seconds()
		g.bar.Describe(fmt.Sprintf("distill %.0f tok/s", float64(g.eng.Stats().Generated)/el))
		g.bar.Add(1)
	}
	return nil
}

// errWriterStopped stops generation when the shard writer goroutine has
// failed; the run reports the writer's own error instead.
var errWriterStopped = errors.New("distill: the shard writer stopped")

// promptError names the prompt (file and line) and the sample a failure
// happened on: a model that produces NaN or infinity fails on some inputs
// only, and the user needs to know which.
func promptError(file string, it *item, err error) error {
	return fmt.Errorf("distill: %s line %d (sample %d): %w", file, it.prompt.Line, it.id, err)
}

// session is a run's open output: the shard writer and responses.jsonl, kept
// in step.
type session struct {
	w    *capture.Writer
	resp *responses
	dir  string
	// total is the number of samples of the run; note is added to the
	// message of an interrupted run.
	total int
	note  string
}

// startSession opens the shard writer, then responses.jsonl: the manifest
// first, so that a directory with a manifest is always resumable. After each
// finished shard responses.jsonl is fsynced, then sync (when set) runs.
func startSession(out *output, opt *Options, total int, sync func() error) (*session, error) {
	s := &session{dir: opt.Out, total: total}
	w, err := out.writer(capture.ShardOptions{MaxRows: opt.ShardRows, MaxBytes: opt.ShardBytes,
		OnShard: func(capture.ShardInfo) error {
			if err := s.resp.sync(); err != nil || sync == nil {
				return err
			}
			return sync()
		}})
	if err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	s.w = w
	if s.resp, err = openResponses(opt.Out, out.manifest.Totals.Samples, out.done, out.fresh); err != nil {
		w.Abort()
		return nil, err
	}
	return s, nil
}

// resumable marks a failure that a rerun of the same command continues from
// once its cause is gone (a server lost mid-run, a request it refused):
// session.fail adds what is stored and says how to resume, with when (""
// for at once).
type resumable struct {
	err  error
	when string
}

func (r *resumable) Error() string { return r.err.Error() }

func (r *resumable) Unwrap() error { return r.err }

// fail stops the session after err: the unfinished shard is dropped and
// responses.jsonl cut back to the stored samples, so the run stays resumable;
// an interruption or a resumable failure says so.
func (s *session) fail(ctx context.Context, err error) error {
	s.w.Abort()
	if terr := s.resp.truncate(s.w.Manifest().Totals.Samples); terr != nil {
		return fmt.Errorf("%w (and %v)", err, terr)
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("distill: interrupted: %s; rerun the same command to resume", s.stored())
	}
	var r *resumable
	if errors.As(err, &r) {
		return fmt.Errorf("%w; %s; rerun the same command to resume%s", err, s.stored(), r.when)
	}
	return err
}

// stored says what the output folder keeps of a run that stopped.
func (s *session) stored() string {
	man := s.w.Manifest()
	return fmt.Sprintf("%d of %d samples are stored in %d shards in %s%s", man.Totals.Samples, s.total, len(man.Shards), s.dir, s.note)
}

// close finishes the last shard, the manifest, responses.jsonl and the
// progress bar.
func (s *session) close(ctx context.Context, bar *progressbar.ProgressBar, progress io.Writer) (*capture.Manifest, error) {
	final, err := s.w.Close()
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	if err := s.resp.close(); err != nil {
		return nil, err
	}
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(progress)
	}
	return final, nil
}

// ending is what a distill's generating step, local or remote, leaves for
// session.finish to report.
type ending struct {
	bar *progressbar.ProgressBar
	// writeTime was spent storing samples; compute is the rest of the
	// capture's share: the states copied out of the decode passes (local)
	// or the teacher-forced prefills (remote).
	writeTime, compute time.Duration
	// empty, when set, is the error of a run that would store no sample.
	empty error
	// gen is generated.jsonl (remote), closed after the manifest; nil for
	// a local run.
	gen *generatedFile
	// report is printed before the summary (remote: the requests made).
	report string
}

// finish ends a distill, local or remote, in one place so that both leave
// the folder alike: a failure (err, or e.empty) stops the session resumably;
// otherwise the last shard, the final manifest and the files are closed and
// sum is completed and printed.
func (s *session) finish(ctx context.Context, opt *Options, sum *Summary, start time.Time, err error, e ending) (*Summary, error) {
	if err == nil {
		err = e.empty
	}
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	t0 := time.Now()
	final, err := s.close(ctx, e.bar, opt.Progress)
	if err != nil {
		return nil, err
	}
	writeTime := e.writeTime + time.Since(t0)
	if err := e.gen.close(); err != nil {
		return nil, err
	}
	sum.Manifest = final
	sum.Seconds = time.Since(start).Seconds()
	sum.CaptureSeconds = (writeTime + e.compute).Seconds()
	if opt.Progress != nil {
		fmt.Fprint(opt.Progress, e.report)
		sum.WriteText(opt.Progress)
	}
	return sum, nil
}

// newBar is a run's progress bar on w (nil without w), done of total already.
func newBar(w io.Writer, what string, total, done int) *progressbar.ProgressBar {
	if w == nil {
		return nil
	}
	bar := progressbar.NewOptions64(int64(total), progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what), progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionSetWidth(30), progressbar.OptionShowElapsedTimeOnFinish())
	bar.Set(done)
	return bar
}

// WriteText prints the summary for people.
func (s *Summary) WriteText(w io.Writer) {
	m := s.Manifest
	fmt.Fprintf(w, "distill: %d samples in %s (%d resumed), %d prompts", m.Totals.Samples, s.Out, s.Resumed, s.Prompts)
	if s.Skipped+s.TooLong > 0 {
		fmt.Fprintf(w, " (%d malformed and %d too long skipped)", s.Skipped, s.TooLong)
	}
	if s.Rejected > 0 {
		fmt.Fprintf(w, ", %d samples skipped for answers without usable token ids (see %s)", s.Rejected, GeneratedName)
	}
	fmt.Fprintf(w, "\n  %d generated tokens in %.1fs: %.0f tokens/s, capture %.1f%% of the time; %s\n",
		s.Generated, s.Seconds, s.TokensPerSecond(), 100*s.CaptureShare(), s.Settings.Params)
	fmt.Fprintf(w, "  %d shards, %d rows (%d response tokens), %.1f MiB, %.0f bytes per token, layers %v + final_norm as %s; trains %s\n",
		len(m.Shards), m.Totals.Rows, m.Totals.ResponseTokens, float64(m.Totals.Bytes)/(1<<20), m.BytesPerToken, m.Layers, m.DType, servesText(m.Serves))
}

func response(t *target.Target, it *item, d generate.Done) *Response {
	p := it.prompt
	r := &Response{ID: it.id, PromptIndex: p.Index, Sample: it.k, PromptLine: p.Line, PromptID: p.ID,
		Response: t.Tok.Decode(d.Tokens, true), ResponseIDs: d.Tokens, FinishReason: d.Finish}
	if p.IsChat() {
		for _, m := range p.Messages {
			r.Messages = append(r.Messages, Message{Role: m.Role, Content: m.Content, Name: m.Name})
		}
		r.Messages = append(r.Messages, Message{Role: "assistant", Content: r.Response})
	} else {
		r.Prompt = p.Text
	}
	return r
}

// output is the capture directory, new or resumed.
type output struct {
	dir      string
	fresh    bool
	done     map[int64]struct{}
	manifest *capture.Manifest
	writer   func(capture.ShardOptions) (*capture.Writer, error)
}

// openOutput starts a capture in dir, or resumes the one there.
func openOutput(dir string, man capture.Manifest, force bool) (*output, error) {
	if force {
		if err := removeCapture(dir); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, capture.ManifestName)); err == nil {
		rs, err := capture.OpenForResume(dir, man.Args)
		if err != nil {
			return nil, fmt.Errorf("%w (or pass --force to start over)", err)
		}
		return &output{dir: dir, done: rs.Done, manifest: rs.Manifest, writer: rs.Writer}, nil
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, ResponsesName)); err == nil {
		return nil, fmt.Errorf("%s holds %s but no %s: not a capture this command can resume; pass --force to start over or choose another directory", dir, ResponsesName, capture.ManifestName)
	}
	o := &output{dir: dir, fresh: true, done: map[int64]struct{}{}, manifest: &capture.Manifest{}}
	o.writer = func(opt capture.ShardOptions) (*capture.Writer, error) { return capture.Create(dir, man, opt) }
	return o, nil
}

// removeCapture deletes the files a capture consists of (and nothing else).
func removeCapture(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--force: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		base := strings.TrimSuffix(n, ".tmp")
		ok := base == capture.ManifestName || base == ResponsesName || base == GeneratedName ||
			(strings.HasPrefix(base, "shard-") && strings.HasSuffix(base, ".arrow"))
		if !ok || e.IsDir() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("--force: %w", err)
		}
	}
	return nil
}

// responses appends lines to responses.jsonl and remembers where each line
// ends, so that the file can be cut back to the samples the manifest lists.
// Each line is written (not buffered) before its sample goes to the shard
// writer, so a process killed at any point leaves at least the lines of the
// samples the manifest lists; fsync follows each finished shard.
type responses struct {
	f    *os.File
	ends []int64 // ends[i] = offset after line i
	buf  bytes.Buffer
	enc  *json.Encoder
}

// openResponses opens dir/responses.jsonl: empty for a new capture, else cut
// to its first stored lines, which must be the stored samples in order.
func openResponses(dir string, stored int64, done map[int64]struct{}, fresh bool) (*responses, error) {
	path := filepath.Join(dir, ResponsesName)
	if fresh {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("distill: %w", err)
		}
		return newResponses(f, nil), nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	var ends []int64
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	for int64(len(ends)) < stored {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("distill: reading %s: %w", path, err)
		}
		off += int64(len(line))
		var head struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(line, &head); err != nil {
			f.Close()
			return nil, fmt.Errorf("distill: %s line %d: %w; pass --force to start over", path, len(ends)+1, err)
		}
		if _, ok := done[head.ID]; !ok {
			f.Close()
			return nil, fmt.Errorf("distill: %s line %d is sample %d, which the shards do not hold; pass --force to start over", path, len(ends)+1, head.ID)
		}
		ends = append(ends, off)
	}
	if int64(len(ends)) < stored {
		f.Close()
		return nil, fmt.Errorf("distill: %s holds %d responses but the shards hold %d samples (a crash before the file reached the disk?); pass --force to start over", path, len(ends), stored)
	}
	rs := newResponses(f, ends)
	if err := rs.truncate(stored); err != nil {
		f.Close()
		return nil, err
	}
	return rs, nil
}

func newResponses(f *os.File, ends []int64) *responses {
	r := &responses{f: f, ends: ends}
	r.enc = json.NewEncoder(&r.buf)
	r.enc.SetEscapeHTML(false)
	return r
}

// add appends one line (buffered).
func (r *responses) add(x *Response) error {
	r.buf.Reset()
	if err := r.enc.Encode(x); err != nil {
		return fmt.Errorf("distill: encoding response %d: %w", x.ID, err)
	}
	if _, err := r.f.Write(r.buf.Bytes()); err != nil {
		return fmt.Errorf("distill: writing %s: %w", ResponsesName, err)
	}
	var last int64
	if len(r.ends) > 0 {
		last = r.ends[len(r.ends)-1]
	}
	r.ends = append(r.ends, last+int64(r.buf.Len()))
	return nil
}

// sync flushes and fsyncs the file (called once a shard is finished).
func (r *responses) sync() error {
	if r.f == nil {
		return nil
	}
	if err := r.f.Sync(); err != nil {
		return fmt.Errorf("distill: syncing %s: %w", ResponsesName, err)
	}
	return nil
}

// truncate cuts the file to its first n lines, the samples the manifest lists.
func (r *responses) truncate(n int64) error {
	if r.f == nil {
		return nil
	}
	var off int64
	if n > 0 {
		off = r.ends[n-1]
	}
	if err := r.f.Truncate(off); err != nil {
		return fmt.Errorf("distill: truncating %s: %w", ResponsesName, err)
	}
	if _, err := r.f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("distill: %s: %w", ResponsesName, err)
	}
	r.ends = r.ends[:n]
	return r.f.Sync()
}

// close syncs and closes the file; it is safe to call twice.
func (r *responses) close() error {
	if r.f == nil {
		return nil
	}
	err := r.sync()
	if cerr := r.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("distill: closing %s: %w", ResponsesName, cerr)
	}
	r.f = nil
	return err
}
