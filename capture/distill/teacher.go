package distill

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/data"
	"github.com/drafter-ai/drafter/pkg/chat"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/outlock"
	"github.com/drafter-ai/drafter/pkg/target"
)

// CaptureOptions configure Capture.
type CaptureOptions struct {
	// Conversations is the file (data.ReadConversations formats); Out the
	// output directory.
	Conversations, Out string
	// SkipInvalid skips (and counts) malformed records and conversations
	// longer than the model's context.
	SkipInvalid bool
	// Batch is the number of conversations prefilled in one forward pass.
	Batch int
	// Layers, DType, ShardRows, ShardBytes, Force and Progress are as for
	// Options.
	Layers                []int
	DType                 capture.DType
	ShardRows, ShardBytes int64
	Force                 bool
	Progress              io.Writer
}

// Capture stores the hidden states of existing conversations: one
// teacher-forced prefill per conversation (Batch of them per forward pass),
// with the loss mask on the assistant turns as the chat template delimits them
// (end-of-turn markers included), or, for {"prompt", "response"} raw pairs, on
// the response tokens plus an appended EOS (a raw response carries no end
// marker, and a drafter must learn where answers end). Sample i is the i-th
// valid record. Groups of Batch consecutive samples share a pass, so a resumed
// capture reproduces an uninterrupted one bit for bit.
//
// Its steps: check the options and take the folder's lock, read and encode
// the conversations into the manifest's plan, open (or resume) the output,
// prefill group by group, then close and report.
func Capture(ctx context.Context, t *target.Target, opt CaptureOptions) (*Summary, error) {
	start := time.Now()
	if err := opt.check(); err != nil {
		return nil, err
	}
	lock, err := outlock.Acquire(opt.Out, "drafter capture")
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	defer lock.Release()
	c, err := prepareCapture(t, &opt)
	if err != nil {
		return nil, err
	}
	w, err := c.open(&opt)
	if err != nil {
		return nil, err
	}
	bar := newBar(opt.Progress, "capture", len(c.items), c.sum.Resumed)
	pf := newPrefiller(t.Model, Taps(c.layers, t.Model.NumLayers()), c.capacity)
	if err := c.prefill(ctx, &opt, w, pf, bar); err != nil {
		return nil, c.fail(ctx, &opt, w, err)
	}
	final, err := w.Close()
	if err != nil {
		return nil, c.fail(ctx, &opt, w, err)
	}
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(opt.Progress)
	}
	sum := c.sum
	sum.Manifest = final
	sum.Seconds = time.Since(start).Seconds()
	sum.CaptureSeconds = sum.Seconds - pf.forward.Seconds()
	if opt.Progress != nil {
		fmt.Fprintf(opt.Progress, "capture: %d samples in %s (%d resumed), %d rows (%d loss-masked), %d shards, %.0f bytes per token, %.1fs; trains %s\n",
			final.Totals.Samples, opt.Out, sum.Resumed, final.Totals.Rows, final.Totals.ResponseTokens, len(final.Shards), final.BytesPerToken, sum.Seconds, servesText(final.Serves))
	}
	return sum, nil
}

// check fills opt's defaults and checks it, before anything is read or
// locked.
func (opt *CaptureOptions) check() error {
	if opt.Batch == 0 {
		opt.Batch = 1
	}
	if opt.DType == "" {
		opt.DType = capture.Float16
	}
	if opt.Batch < 1 {
		return fmt.Errorf("capture: --batch %d: want at least 1", opt.Batch)
	}
	if opt.Out == "" {
		return fmt.Errorf("capture: no output directory")
	}
	return nil
}

// sampleIn is one conversation of a capture, encoded.
type sampleIn struct {
	id   int64
	ids  []int
	mask []bool
}

// capturePlan is what Capture resolved before prefilling: the layers, the
// samples, the longest one and the manifest that describes the run.
type capturePlan struct {
	layers   []int
	items    []sampleIn
	capacity int
	sum      *Summary
	man      capture.Manifest
}

// prepareCapture reads and encodes the conversations and builds the
// manifest; a conversation that cannot be encoded or does not fit the model
// stops the run unless --skip-invalid counts it.
func prepareCapture(t *target.Target, opt *CaptureOptions) (*capturePlan, error) {
	m := t.Model
	layers, err := Layers(t.Config, m.NumLayers(), opt.Layers)
	if err != nil {
		return nil, fmt.Errorf("capture: --layers: %w", err)
	}
	convs, skipped, err := data.ReadConversations(opt.Conversations, data.ReadOptions{SkipInvalid: opt.SkipInvalid})
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	hash, err := data.PromptHash(opt.Conversations)
	if err != nil {
		return nil, err
	}
	c := &capturePlan{layers: layers, sum: &Summary{Out: opt.Out, Prompts: len(convs), Skipped: skipped}}
	eos := t.Stop[0]
	for i := range convs {
		cv := &convs[i]
		ids, mask, err := encodeConversation(t, cv, eos)
		if err == nil && len(ids) > m.MaxPositions() {
			err = fmt.Errorf("%d tokens exceed the model's context of %d", len(ids), m.MaxPositions())
		}
		if err != nil {
			if !opt.SkipInvalid {
				return nil, fmt.Errorf("capture: %s:%d: %w (--skip-invalid skips such records)", opt.Conversations, cv.Line, err)
			}
			c.sum.TooLong++
			continue
		}
		c.items = append(c.items, sampleIn{id: int64(cv.Index), ids: ids, mask: mask})
	}
	if len(c.items) == 0 {
		return nil, fmt.Errorf("capture: %s holds no usable conversations", opt.Conversations)
	}
	c.sum.Samples = len(c.items)
	c.capacity = 1
	for _, it := range c.items {
		c.capacity = max(c.capacity, len(it.ids))
	}
	args := map[string]string{
		"command": "capture", "model_fingerprint": t.Fingerprint, "tokenizer_hash": t.TokenizerHash,
		"chat_template_hash": t.TemplateHash(), "prompt_file_hash": hash, "skip_invalid": strconv.FormatBool(opt.SkipInvalid),
		"batch": strconv.Itoa(opt.Batch), "layers": fmt.Sprint(layers), "dtype": string(opt.DType),
		"shard_rows": strconv.FormatInt(opt.ShardRows, 10), "shard_bytes": strconv.FormatInt(opt.ShardBytes, 10),
	}
	c.man = capture.Manifest{ModelFingerprint: t.Fingerprint, Layers: layers, FinalNorm: true, DType: opt.DType,
		HiddenSize: m.HiddenSize(), TokenizerHash: t.TokenizerHash, ChatTemplateHash: t.TemplateHash(),
		Generation: map[string]any{"teacher_forced": true, "raw_pair_eos": eos}, PromptFileHash: hash, Args: args, Serves: serves(t.Config, layers)}
	return c, nil
}

// open starts the capture in opt.Out or resumes the one there, whose stored
// samples must be this run's first ones (the groups restart from their
// count), and returns the shard writer.
func (c *capturePlan) open(opt *CaptureOptions) (*capture.Writer, error) {
	out, err := openOutput(opt.Out, c.man, opt.Force)
	if err != nil {
		// Not wrapped: the errors name the folder, and the resume refusals
		// already begin "capture: cannot resume".
		return nil, err
	}
	done := len(out.done)
	for i := 0; i < done; i++ {
		if i >= len(c.items) || !has(out.done, c.items[i].id) {
			return nil, fmt.Errorf("capture: %s stores samples that are not this run's first %d; start over with --force", opt.Out, done)
		}
	}
	c.sum.Resumed = done
	w, err := out.writer(capture.ShardOptions{MaxRows: opt.ShardRows, MaxBytes: opt.ShardBytes})
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	return w, nil
}

// prefill runs the groups of Batch samples from the one holding the first
// sample not yet stored, writing each new sample's states to w; the already
// stored samples of that group are prefilled again so that the pass is
// composed as in an uninterrupted run.
func (c *capturePlan) prefill(ctx context.Context, opt *CaptureOptions, w *capture.Writer, pf *prefiller, bar *progressbar.ProgressBar) error {
	items, done := c.items, c.sum.Resumed
	var tok32 []int32
	seqs := make([][]int, 0, opt.Batch)
	for g0 := done / opt.Batch * opt.Batch; g0 < len(items) && done < len(items); g0 += opt.Batch {
		if err := ctx.Err(); err != nil {
			return err
		}
		group := items[g0:min(g0+opt.Batch, len(items))]
		seqs = seqs[:0]
		for _, it := range group {
			seqs = append(seqs, it.ids)
		}
		err := pf.run(seqs, func(b int, states [][]float32) error {
			it := group[b]
			if g0+b < done {
				return nil // stored before the restart
			}
			tok32 = tok32[:0]
			for _, id := range it.ids {
				tok32 = append(tok32, int32(id))
			}
			if err := w.Write(capture.Sample{ID: it.id, Tokens: tok32, LossMask: it.mask, States: states}); err != nil {
				return fmt.Errorf("capture: %s record %d: %w", opt.Conversations, it.id+1, err)
			}
			if bar != nil {
				bar.Add(1)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// fail stops the capture after err, dropping the unfinished shard so that
// the run stays resumable; an interruption says what is stored and how to
// resume.
func (c *capturePlan) fail(ctx context.Context, opt *CaptureOptions, w *capture.Writer, err error) error {
	w.Abort()
	if ctx.Err() != nil && err == ctx.Err() {
		mm := w.Manifest()
		return fmt.Errorf("capture: interrupted: %d of %d samples are stored in %d shards in %s; rerun the same command to resume",
			mm.Totals.Samples, len(c.items), len(mm.Shards), opt.Out)
	}
	return err
}

// prefiller runs teacher-forced prefills of whole sequences, several per
// forward pass, and hands over the tapped states of every position. A pass's
// composition is exactly the sequences given to run, so a resumed capture that
// regroups the same sequences reproduces the same bits.
type prefiller struct {
	m        *model.Model
	opt      model.Options
	capacity int
	seqs     []*model.Sequence
	batch    []model.Input
	states   [][]float32
	// forward is the time spent in model.Forward.
	forward time.Duration
}

// newPrefiller prepares prefills of sequences up to capacity tokens, storing
// the model taps taps.
func newPrefiller(m *model.Model, taps []int, capacity int) *prefiller {
	return &prefiller{m: m, opt: model.Options{Taps: taps}, capacity: capacity, states: make([][]float32, len(taps))}
}

// run prefills seqs in one forward pass and calls write(b, states) for each,
// in order, with the states of sequence b per tap ([len(seqs[b])*H], valid
// until write returns).
func (p *prefiller) run(seqs [][]int, write func(b int, states [][]float32) error) error {
	p.batch = p.batch[:0]
	for i, ids := range seqs {
		if i == len(p.seqs) {
			s, err := p.m.NewSequence(p.capacity)
			if err != nil {
				return err
			}
			p.seqs = append(p.seqs, s)
		}
		p.seqs[i].Reset()
		p.batch = append(p.batch, model.Input{Seq: p.seqs[i], Tokens: ids, Logits: model.LogitsNone})
	}
	t0 := time.Now()
	res, err := p.m.Forward(p.batch, p.opt)
	p.forward += time.Since(t0)
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	for b := range seqs {
		for c := range p.states {
			p.states[c] = res.HiddenOf(c, b)
		}
		if err := write(b, p.states); err != nil {
			return err
		}
	}
	return nil
}

func has(m map[int64]struct{}, k int64) bool {
	_, ok := m[k]
	return ok
}

// encodeConversation returns the model input of a conversation and its loss
// mask: assistant spans for chat (tokenized without special tokens: the
// template writes BOS), the response plus an appended eos for a raw pair
// (tokenized with the post-processor, as a raw prompt is).
func encodeConversation(t *target.Target, c *data.Conversation, eos int) ([]int, []bool, error) {
	if c.IsChat() && t.Template == nil {
		return nil, nil, data.ErrNoChatTemplate
	}
	text, spans, err := data.RenderConversation(*c, t.Template, chat.Options{})
	if err != nil {
		return nil, nil, err
	}
	ids, offsets := t.Tok.EncodeOffsets(text, !c.IsChat())
	mask := chat.TokenMask(nil, offsets, spans)
	if !c.IsChat() {
		ids = append(ids, eos)
		mask = append(mask, true)
	}
	if chat.CountMasked(mask) == 0 {
		return nil, nil, fmt.Errorf("no assistant or response tokens to train on")
	}
	return ids, mask, nil
}
