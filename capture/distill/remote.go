package distill

// Generation by serving engines (distill --generator): the responses come
// from OpenAI-compatible servers through package completions, the states from
// teacher-forced prefills of prompt+response on the local device (the
// prefiller Capture uses), written to the same shards, responses.jsonl and
// manifest as a local distill.
//
// Every answer is appended to generated.jsonl as soon as it arrives, before
// its sample is captured, so a run killed at any moment asks the servers only
// for what it never received; a rerun with the same arguments replays the
// recorded answers. Samples are captured in groups of --batch consecutive
// usable samples, so that a resumed run forms the same forward passes as an
// uninterrupted one and writes the same bytes; the manifest's generation
// block is held as manifest.json decodes it, so that it marshals to the same
// bytes too.
//
// A failure while generating names the sample's prompt (file and line), what
// is stored and how to resume; recorded answers are checked when read back,
// naming the file and line of a damaged one. A run whose every answer is
// unusable fails rather than leave an empty capture.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/data"
	"github.com/drafter-ai/drafter/pkg/completions"
	"github.com/drafter-ai/drafter/pkg/generate"
	"github.com/drafter-ai/drafter/pkg/sample"
	"github.com/drafter-ai/drafter/pkg/target"
)

// GeneratedName is the file, inside the output directory, of every answer the
// serving engines gave (remote generation), the unusable ones with the reason.
const GeneratedName = "generated.jsonl"

// seedRule describes sampleSeed in the manifest.
const seedRule = "sample k of prompt i is sent seed 1 + (x_i + k) mod (2^31-1), x_i the first draw of drafter's random stream (seed, i)"

// sampleSeed is the seed sent for sample k of prompt i: the samples of one
// prompt get distinct seeds, each a function of (seed, i, k) only, in the
// range every engine reads alike (completions.MaxSeed).
func sampleSeed(seed uint64, prompt, k int) int64 {
	x := sample.NewRNG(seed, uint64(prompt)).Uint64() % completions.MaxSeed
	return 1 + int64((x+uint64(k))%completions.MaxSeed)
}

// generatedLine is one line of generated.jsonl.
type generatedLine struct {
	// ID is the sample id; Request a hash of the request sent, so that a
	// rerun replays the answer only to the same request.
	ID      int64  `json:"id"`
	Request string `json:"request"`
	// IDs and Finish ("eos" or "length") are the usable answer; Source
	// where its ids came from.
	IDs    []int              `json:"response_ids,omitempty"`
	Finish string             `json:"finish_reason,omitempty"`
	Source completions.Source `json:"token_id_source,omitempty"`
	// Skipped says why the answer could not be used; the sample is left out.
	Skipped string `json:"skipped,omitempty"`

	// line is the line's number in the file it was read from, for errors.
	line int
}

// runRemote is Run with opt.Generator set; p is what prepare resolved. Its
// steps: connect to the servers, resolve the manifest and open (or resume)
// the output, schedule the requests, collect the answers in sample order
// while capturing the usable ones, then finish as a local run does.
func runRemote(ctx context.Context, t *target.Target, opt Options, p *plan, start time.Time) (*Summary, error) {
	client, notes, err := newGeneratorClient(&opt)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	gopt := client.Options()
	rq := &requester{t: t, seed: opt.Seed, params: p.settings.Params, api: gopt.API}
	info, err := connect(ctx, client, rq, &opt, p.items, notes)
	if err != nil {
		return nil, err
	}
	man, err := remoteManifest(p.man, gopt, info)
	if err != nil {
		return nil, err
	}
	c, err := openRemote(ctx, t, &opt, p, man)
	if err != nil {
		return nil, err
	}
	defer c.ses.resp.close()
	defer c.gen.close()
	sched, err := scheduleRequests(&opt, p.items, rq, c.out, c.gen)
	if err != nil {
		return nil, c.ses.fail(ctx, err)
	}
	c.bar = newBar(opt.Progress, "distill", len(p.items), 0)
	c.pf = newPrefiller(t.Model, Taps(p.layers, t.Model.NumLayers()), p.capacity)
	c.start = start
	err = c.collect(ctx, client, sched, info.Source)
	e := ending{bar: c.bar, writeTime: c.writeTime, compute: c.pf.forward, gen: c.gen,
		report: fmt.Sprintf("distill: %d requests to %s (%s, token ids from %s)\n", c.requests, info.Model, info.API, info.Source)}
	if c.usable == 0 {
		e.empty = nothingUsable(opt, p.sum, len(p.items), c.firstSkip)
	}
	return c.ses.finish(ctx, &opt, p.sum, start, err, e)
}

// newGeneratorClient makes the completions client of opt.Generator, with the
// retries and the servers' notices said on the run's writers unless the
// caller set its own; it returns the writer of the notices too (nil: none).
func newGeneratorClient(opt *Options) (*completions.Client, io.Writer, error) {
	gopts := *opt.Generator
	if opt.Progress != nil && gopts.OnRetry == nil {
		gopts.OnRetry = newRetryNotices(opt.Progress, 5*time.Second).note
	}
	notes := opt.Notes
	if notes == nil {
		notes = opt.Progress
	}
	if notes != nil && gopts.Notify == nil {
		var mu sync.Mutex // the background probes tell from their own goroutines
		nl := ""
		if opt.Progress != nil {
			nl = "\n" // off the progress bar's line
		}
		gopts.Notify = func(msg string) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(notes, "%sdistill: %s\n", nl, msg)
		}
	}
	client, err := completions.New(gopts)
	if err != nil {
		return nil, nil, fmt.Errorf("distill: --generator: %w", err)
	}
	return client, notes, nil
}

// requester builds the request of a sample: a function of the sample and
// the run's settings only, so that its hash tells a rerun whether a recorded
// answer still applies.
type requester struct {
	t      *target.Target
	seed   uint64
	params sample.Params
	api    completions.API
}

// request is the request for sample it.
func (q *requester) request(it *item) (completions.Request, error) {
	t, sp := q.t, q.params
	r := completions.Request{Key: uint64(it.id), Prompt: it.ids, MaxTokens: it.budget, Seed: sampleSeed(q.seed, it.prompt.Index, it.k),
		Sampling: completions.Sampling{Temperature: sp.Temperature, TopP: sp.TopP, TopK: sp.TopK, MinP: sp.MinP}, Stop: t.Stop}
	if q.api == completions.TGI {
		text, special, err := promptText(t, it)
		if err != nil {
			return r, err
		}
		// TGI adds the tokenizer's special tokens to any text; a chat
		// template writes BOS itself. The prefill check catches the rest.
		if bos := t.Tok.BOSToken(); !special && bos != "" {
			text = strings.TrimPrefix(text, bos)
		}
		r.PromptText = text
	}
	return r, nil
}

// connect probes the servers with the first sample's request (one token to
// generate) and says their warnings on notes; a run without samples asks
// nothing and gets a zero Info.
func connect(ctx context.Context, client *completions.Client, rq *requester, opt *Options, items []item, notes io.Writer) (completions.Info, error) {
	var info completions.Info
	if len(items) == 0 {
		return info, nil
	}
	probe, err := rq.request(&items[0])
	if err != nil {
		return info, err
	}
	got, err := client.Connect(ctx, probe)
	if err != nil {
		var se *completions.StatusError
		if errors.As(err, &se) && se.Status == http.StatusBadRequest {
			// The probe is the first sample, with one token to generate.
			return info, fmt.Errorf("distill: --generator: the server refused the probe request (sample %d, %s line %d, 1 token to generate): %w",
				items[0].id, opt.Prompts, items[0].prompt.Line, err)
		}
		return info, fmt.Errorf("distill: --generator: %w", err)
	}
	info = *got
	for _, w := range info.Warnings {
		if notes != nil {
			fmt.Fprintf(notes, "distill: warning: %s\n", w)
		}
	}
	return info, nil
}

// remoteManifest adds the servers to the run's manifest: its arguments (a
// resume must talk to the same kind of server) and its generation block,
// held as manifest.json decodes it so that it marshals to the same bytes
// whether built or read back.
func remoteManifest(man capture.Manifest, gopt completions.Options, info completions.Info) (capture.Manifest, error) {
	man.Args["generator_api"] = string(gopt.API)
	man.Args["generator_model"] = info.Model
	man.Args["generator_token_ids"] = string(info.Source)
	if gopt.AllowServedModel != "" {
		// Answers naming this model are accepted: a resume must accept the same.
		man.Args["generator_served_model"] = gopt.AllowServedModel
	}
	gen0 := maps.Clone(man.Generation.(map[string]any))
	gen0["generator"] = info
	gen0["seeds"] = seedRule
	var err error
	if man.Generation, err = canonical(gen0); err != nil {
		return man, err
	}
	return man, nil
}

// openRemote opens (or resumes) the output of a remote run: the shards and
// responses.jsonl, the stored answers of the group to prefill again, and
// generated.jsonl. The collector it returns holds them; the caller closes
// its files.
func openRemote(ctx context.Context, t *target.Target, opt *Options, p *plan, man capture.Manifest) (*collector, error) {
	out, err := openOutput(opt.Out, man, opt.Force)
	if err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	m := t.Model
	c := &collector{t: t, opt: opt, items: p.items, sum: p.sum, out: out,
		group: make([]member, 0, opt.Batch), seqs: make([][]int, opt.Batch)}
	c.done = len(out.done)
	p.sum.Resumed = c.done
	c.restart = c.done / opt.Batch * opt.Batch // first usable sample of the group to prefill again
	if c.stored, err = readStored(opt.Out, c.restart, out.manifest.Totals.Samples, m.VocabSize()); err != nil {
		return nil, err
	}
	if c.ses, err = startSession(out, opt, len(p.items), func() error { return c.gen.sync() }); err != nil {
		return nil, err
	}
	c.ses.note = " (and every answer received in " + GeneratedName + ")"
	if c.gen, err = openGenerated(opt.Out, out.fresh, out.done, m.VocabSize()); err != nil {
		err = c.ses.fail(ctx, err)
		c.ses.resp.close()
		return nil, err
	}
	return c, nil
}

// schedule is what is known of each sample when the answers start: the hash
// of its request, and the requests still to send (todo, positions in the
// run's items, with their requests).
type schedule struct {
	hashes []string
	index  map[int64]int // sample id -> position in items
	todo   []int
	reqs   []completions.Request
}

// scheduleRequests sorts the samples into stored, answered before (recorded
// in generated.jsonl for the same request) and still to ask for. The stored
// samples must be the first usable ones, and a recorded answer must fit its
// budget; otherwise the folder is not this run's to resume.
func scheduleRequests(opt *Options, items []item, rq *requester, out *output, gen *generatedFile) (*schedule, error) {
	s := &schedule{hashes: make([]string, len(items)), index: make(map[int64]int, len(items))}
	firstOpen := len(items) // first sample neither stored nor recorded as skipped
	for i := range items {
		it := &items[i]
		r, err := rq.request(it)
		if err != nil {
			return nil, err
		}
		s.hashes[i] = requestHash(r)
		s.index[it.id] = i
		rec, ok := gen.lines[it.id]
		recorded := ok && rec.Request == s.hashes[i]
		if recorded && rec.Skipped == "" && len(rec.IDs) > it.budget {
			return nil, fmt.Errorf("distill: %s line %d: sample %d has %d response ids, more than its budget of %d new tokens: the file is damaged; pass --force to start over",
				filepath.Join(opt.Out, GeneratedName), rec.line, it.id, len(rec.IDs), it.budget)
		}
		switch {
		case has(out.done, it.id):
			if i > firstOpen {
				return nil, fmt.Errorf("distill: %s stores sample %d but not the earlier sample %d, and %s does not say it was skipped; start over with --force",
					opt.Out, it.id, items[firstOpen].id, GeneratedName)
			}
		case recorded && rec.Skipped != "":
		default:
			firstOpen = min(firstOpen, i)
			if !recorded {
				s.todo = append(s.todo, i)
				s.reqs = append(s.reqs, r)
			}
		}
	}
	return s, nil
}

// member is a usable sample waiting in the prefill group.
type member struct {
	it     *item
	ids    []int
	finish string
	// store is false for a sample stored before the restart, prefilled
	// again only so that the pass is composed as in an uninterrupted run.
	store bool
}

// collector takes a remote run's samples in order, whether answered now,
// recorded in generated.jsonl or stored, and captures the usable ones in
// groups of --batch consecutive ones; its buffers are reused from group to
// group.
type collector struct {
	t     *target.Target
	opt   *Options
	items []item
	sum   *Summary
	out   *output
	ses   *session
	gen   *generatedFile
	pf    *prefiller
	bar   *progressbar.ProgressBar
	start time.Time
	// stored holds the responses of the stored samples from restart on;
	// done samples were stored before this run, restart is the first
	// usable sample of the group to prefill again.
	stored        map[int64]*Response
	done, restart int

	group     []member
	seqs      [][]int
	tok32     []int32
	mask      []bool
	writeTime time.Duration
	requests  int
	usable    int
	// firstSkip is the first unusable answer, for a run that stores nothing.
	firstSkip       string
	skippedUnsynced bool
	// next is the next sample to handle.
	next int
}

// collect sends the scheduled requests and takes the answers in sample
// order, replaying the recorded samples between them, then captures the
// last, partial group. A failed request names its sample's prompt.
func (c *collector) collect(ctx context.Context, client *completions.Client, s *schedule, source completions.Source) error {
	items := c.items
	err := client.Run(ctx, len(s.todo), func(j int) completions.Request { return s.reqs[j] }, func(j int, r *completions.Response, rerr error) error {
		i := s.todo[j]
		if err := c.replayUpTo(ctx, i); err != nil {
			return err
		}
		line, err := answer(c.t, &items[i], s.hashes[i], source, r, rerr)
		if err != nil {
			// Not recorded: a rerun asks for this answer again.
			return &resumable{err: err, when: " once the cause is fixed"}
		}
		c.requests++
		c.sum.Generated += int64(len(line.IDs))
		if err := c.gen.add(line); err != nil {
			return err
		}
		c.next = i + 1
		return c.handle(ctx, i, line.IDs, line.Finish, line.Skipped)
	})
	var re *completions.RequestError
	if errors.As(err, &re) && ctx.Err() == nil {
		if i, ok := s.index[int64(re.Key)]; ok {
			// Name the prompt, not the request number, and keep the server's
			// words.
			r := &resumable{err: fmt.Errorf("distill: --generator: generating sample %d (%s line %d): %w", re.Key, c.opt.Prompts, items[i].prompt.Line, re.Err)}
			if se := (*completions.StatusError)(nil); errors.As(re, &se) && !se.Temporary() {
				r.when = " once the server accepts this request"
			} else {
				r.when = " once a server answers"
			}
			err = r
		}
	}
	if err == nil {
		err = c.replayUpTo(ctx, len(items))
	}
	if err == nil && len(c.group) > 0 {
		err = c.flush(ctx)
	}
	return err
}

// replayUpTo handles the samples from next to end, none of which is asked
// for: stored (with its response read back when its group is prefilled
// again) or recorded in generated.jsonl.
func (c *collector) replayUpTo(ctx context.Context, end int) error {
	for ; c.next < end; c.next++ {
		it := &c.items[c.next]
		if r, ok := c.stored[it.id]; ok {
			if err := c.handle(ctx, c.next, r.ResponseIDs, r.FinishReason, ""); err != nil {
				return err
			}
			continue
		}
		if has(c.out.done, it.id) { // stored in a group that need not be prefilled again
			if err := c.handle(ctx, c.next, nil, "", ""); err != nil {
				return err
			}
			continue
		}
		rec := c.gen.lines[it.id]
		if err := c.handle(ctx, c.next, rec.IDs, rec.Finish, rec.Skipped); err != nil {
			return err
		}
	}
	return nil
}

// handle takes sample i, in order: an unusable one (skipped, the reason)
// is counted and said; a usable one joins the prefill group, which is
// captured once full.
func (c *collector) handle(ctx context.Context, i int, ids []int, finish, skipped string) error {
	it := &c.items[i]
	if c.bar != nil {
		el := time.Since(c.start).Seconds()
		c.bar.Describe(fmt.Sprintf("distill %.1f req/s %.0f tok/s", float64(c.requests)/el, float64(c.sum.Generated)/el))
		c.bar.Add(1)
	}
	if skipped != "" {
		c.sum.Rejected++
		c.skippedUnsynced = true
		if c.firstSkip == "" {
			c.firstSkip = fmt.Sprintf("sample %d, %s line %d: %s", it.id, c.opt.Prompts, it.prompt.Line, skipped)
		}
		if c.opt.Progress != nil {
			fmt.Fprintf(c.opt.Progress, "distill: skipping sample %d (%s:%d): %s\n", it.id, c.opt.Prompts, it.prompt.Line, skipped)
		}
		return nil
	}
	k := c.usable
	c.usable++
	if k < c.restart {
		return nil
	}
	c.group = append(c.group, member{it: it, ids: ids, finish: finish, store: k >= c.done})
	if len(c.group) == c.opt.Batch {
		return c.flush(ctx)
	}
	return nil
}

// flush captures the group: one teacher-forced prefill of prompt+answer per
// member, in one pass, each new member stored as it comes out.
func (c *collector) flush(ctx context.Context) error {
	// A skip record must reach the disk before a later sample can land in a
	// finished shard: a resume tells skipped samples from lost ones by it.
	// (Usable answers are in responses.jsonl as well.)
	if c.skippedUnsynced {
		if err := c.gen.sync(); err != nil {
			return err
		}
		c.skippedUnsynced = false
	}
	group := c.group
	for b, g := range group {
		c.seqs[b] = append(append(c.seqs[b][:0], g.it.ids...), g.ids...)
	}
	var storeErr error // an error of the storing step, which names its sample
	err := c.pf.run(c.seqs[:len(group)], func(b int, states [][]float32) (err error) {
		defer func() { storeErr = err }()
		return c.store(b, states)
	})
	if err != nil && err != storeErr && ctx.Err() == nil {
		err = fmt.Errorf("distill: capturing the states of samples %d to %d (teacher-forced prefill on this machine): %w", group[0].it.id, group[len(group)-1].it.id, err)
	}
	c.group = group[:0]
	return err
}

// store writes member b of the group with its prefilled states: its
// response line, then its shard rows. A member stored before the restart
// is left alone.
func (c *collector) store(b int, states [][]float32) error {
	g := c.group[b]
	if !g.store {
		return nil
	}
	t0 := time.Now()
	c.tok32, c.mask = c.tok32[:0], c.mask[:0]
	for j, id := range c.seqs[b] {
		c.tok32 = append(c.tok32, int32(id))
		c.mask = append(c.mask, j >= len(g.it.ids))
	}
	if err := c.ses.resp.add(response(c.t, g.it, generate.Done{Tokens: g.ids, Finish: g.finish})); err != nil {
		return err
	}
	if err := c.ses.w.Write(capture.Sample{ID: g.it.id, Tokens: c.tok32, LossMask: c.mask, States: states}); err != nil {
		return promptError(c.opt.Prompts, g.it, err)
	}
	c.writeTime += time.Since(t0)
	return nil
}

// nothingUsable is the error of a run whose every answer was unusable: it
// would store an empty capture, which trains nothing. It says how many
// samples and prompts, and the first reason.
func nothingUsable(opt Options, sum *Summary, samples int, first string) error {
	also := ""
	if sum.Skipped+sum.TooLong > 0 {
		also = fmt.Sprintf("; besides, --skip-invalid skipped %d malformed and %d too long prompts", sum.Skipped, sum.TooLong)
	}
	return fmt.Errorf("distill: no sample stored: the --generator servers' answers to all %d samples (of %d prompts) were unusable (the first: %s)%s; every reason is in %s, which a rerun replays (--force asks the servers again)",
		samples, samples/opt.SamplesPerPrompt, first, also, filepath.Join(opt.Out, GeneratedName))
}

// answer turns a server's answer to sample it into its generated.jsonl line:
// ids checked against the model's vocabulary, a text-only answer
// re-tokenized in the context of its prompt, an unusable answer recorded with
// the reason. An answer that contradicts the run (another token-id source,
// ids outside the vocabulary) stops it.
func answer(t *target.Target, it *item, hash string, source completions.Source, r *completions.Response, rerr error) (generatedLine, error) {
	line := generatedLine{ID: it.id, Request: hash}
	if rerr != nil {
		// The reason alone: the line and the notice name the sample.
		line.Skipped = rerr.Error()
		if rej := (*completions.RejectError)(nil); errors.As(rerr, &rej) {
			line.Skipped = rej.Reason
		}
		return line, nil
	}
	if r.Source != source {
		return line, fmt.Errorf("distill: %s answered sample %d with token ids from %s, but this run takes them from %s", r.URL, it.id, r.Source, source)
	}
	if r.Source == completions.SourceText {
		// Encode and decode in the context of the prompt, as engines
		// detokenize: the answer's first token may begin with a space that a
		// standalone decode drops, or join the prompt's last characters.
		prefix, special, err := promptText(t, it)
		if err != nil {
			return line, err
		}
		before := t.Tok.Decode(it.ids, true)
		err = r.Retokenize(func(text string) ([]int, error) {
			full := t.Tok.Encode(prefix+text, special)
			if len(full) < len(it.ids) || !slices.Equal(full[:len(it.ids)], it.ids) {
				return nil, fmt.Errorf("the prompt's last tokens merge with the answer's first")
			}
			return full[len(it.ids):], nil
		}, func(ids []int) string {
			full := t.Tok.Decode(append(slices.Clone(it.ids), ids...), true)
			if !strings.HasPrefix(full, before) {
				return full
			}
			return full[len(before):]
		})
		if err != nil {
			line.Skipped = err.Error()
			return line, nil
		}
	}
	for _, id := range r.IDs {
		if id >= t.Model.VocabSize() {
			return line, fmt.Errorf("distill: %s answered sample %d with token id %d, outside the model's vocabulary of %d: is it serving this checkpoint?", r.URL, it.id, id, t.Model.VocabSize())
		}
	}
	line.IDs, line.Source, line.Finish = r.IDs, r.Source, generate.FinishLength
	if r.Finish == completions.FinishStop {
		line.Finish = generate.FinishEOS
	}
	return line, nil
}

// promptText is the text the prompt's ids encode and whether it is tokenized
// with special tokens (raw text) or without (a rendered chat template).
func promptText(t *target.Target, it *item) (string, bool, error) {
	if !it.prompt.IsChat() {
		return it.prompt.Text, true, nil
	}
	text, err := data.Render(*it.prompt, t.Template)
	return text, false, err
}

// requestHash identifies a request's content.
func requestHash(r completions.Request) string {
	b, _ := json.Marshal(r)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}

// readStored reads lines from..n-1 (0-based) of responses.jsonl, stored
// samples whose group is prefilled again.
func readStored(dir string, from int, n int64, vocab int) (map[int64]*Response, error) {
	out := map[int64]*Response{}
	if int64(from) >= n {
		return out, nil
	}
	path := filepath.Join(dir, ResponsesName)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	for i := int64(0); i < n; i++ {
		var r Response
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("distill: %s line %d: %v; pass --force to start over", path, i+1, err)
		}
		if i >= int64(from) {
			if why := checkIDs(r.ResponseIDs, r.FinishReason, vocab); why != "" {
				return nil, fmt.Errorf("distill: %s line %d (sample %d): %s: the file is damaged; pass --force to start over", path, i+1, r.ID, why)
			}
			out[r.ID] = &r
		}
	}
	return out, nil
}

// generatedFile appends to generated.jsonl; lines holds what it held when
// opened, less the answers of stored samples (responses.jsonl has them). Each line is written (not buffered) before its sample is captured
// and the file is fsynced with each finished shard.
type generatedFile struct {
	f     *os.File
	lines map[int64]generatedLine
	buf   bytes.Buffer
	enc   *json.Encoder
}

// checkIDs says what is wrong with a recorded answer (response ids and finish
// reason) for a model of vocab ids, "" when nothing: drafter records only
// whole answers checked against the vocabulary, so anything else is damage,
// better named here, with the file and line, than met in a forward pass.
func checkIDs(ids []int, finish string, vocab int) string {
	if len(ids) == 0 {
		return "an answer without response_ids"
	}
	if finish != generate.FinishEOS && finish != generate.FinishLength {
		return fmt.Sprintf("finish_reason %q, want %s or %s", finish, generate.FinishEOS, generate.FinishLength)
	}
	for _, id := range ids {
		if id < 0 || id >= vocab {
			return fmt.Sprintf("token id %d, outside the model's vocabulary of %d", id, vocab)
		}
	}
	return ""
}

// openGenerated opens dir/generated.jsonl: empty for a new capture, else read
// and cut after its last complete line (a line torn by a kill is dropped; its
// answer is asked for again). A complete line that is not a valid answer for
// a model of vocab ids is refused, naming the file and line.
func openGenerated(dir string, fresh bool, stored map[int64]struct{}, vocab int) (*generatedFile, error) {
	path := filepath.Join(dir, GeneratedName)
	g := &generatedFile{lines: map[int64]generatedLine{}}
	g.enc = json.NewEncoder(&g.buf)
	g.enc.SetEscapeHTML(false)
	flag := os.O_RDWR | os.O_CREATE
	if fresh {
		flag |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	g.f = f
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			break // a final line without a newline is torn
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("distill: reading %s: %w", path, err)
		}
		var l generatedLine
		if err := json.Unmarshal(line, &l); err != nil {
			f.Close()
			return nil, fmt.Errorf("distill: %s line %d: %v; pass --force to start over", path, n, err)
		}
		if l.Skipped != "" || !has(stored, l.ID) {
			if why := checkIDs(l.IDs, l.Finish, vocab); l.Skipped == "" && why != "" {
				f.Close()
				return nil, fmt.Errorf("distill: %s line %d (sample %d): %s: the file is damaged; pass --force to start over", path, n, l.ID, why)
			}
			l.line = n
			g.lines[l.ID] = l
		}
		off += int64(len(line))
	}
	if err := f.Truncate(off); err != nil {
		f.Close()
		return nil, fmt.Errorf("distill: truncating %s: %w", path, err)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("distill: %s: %w", path, err)
	}
	return g, nil
}

// add writes one line.
func (g *generatedFile) add(l generatedLine) error {
	g.buf.Reset()
	if err := g.enc.Encode(l); err != nil {
		return fmt.Errorf("distill: encoding answer %d: %w", l.ID, err)
	}
	if _, err := g.f.Write(g.buf.Bytes()); err != nil {
		return fmt.Errorf("distill: writing %s: %w", GeneratedName, err)
	}
	return nil
}

// sync fsyncs the file.
func (g *generatedFile) sync() error {
	if g == nil || g.f == nil {
		return nil
	}
	if err := g.f.Sync(); err != nil {
		return fmt.Errorf("distill: syncing %s: %w", GeneratedName, err)
	}
	return nil
}

// close syncs and closes the file; it is safe to call twice, and on nil.
func (g *generatedFile) close() error {
	if g == nil || g.f == nil {
		return nil
	}
	err := g.sync()
	if cerr := g.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("distill: closing %s: %w", GeneratedName, cerr)
	}
	g.f = nil
	return err
}

// retryNotices reports the client's retries on the progress writer, at most
// one line per server every interval, so that a slow or unreachable server is
// seen while the client waits for it, without a line per request.
type retryNotices struct {
	w        io.Writer
	interval time.Duration
	mu       sync.Mutex
	last     map[string]time.Time
	quiet    map[string]int // retries not reported since the last line
}

func newRetryNotices(w io.Writer, interval time.Duration) *retryNotices {
	return &retryNotices{w: w, interval: interval, last: map[string]time.Time{}, quiet: map[string]int{}}
}

// note is completions.Options.OnRetry.
func (n *retryNotices) note(r completions.Retry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	key, capped := r.URL, ""
	if r.Asked > 0 {
		// Throttled apart, so that the first cut wait of a server is always
		// said, however many ordinary retries came before it.
		key = r.URL + " capped"
		capped = fmt.Sprintf(" (the server asked for %v; waits are capped at %v)", r.Asked.Round(time.Second), completions.MaxRetryAfter)
	}
	if t, ok := n.last[key]; ok && now.Sub(t) < n.interval {
		n.quiet[key]++
		return
	}
	more := ""
	if q := n.quiet[key]; q > 0 {
		more = fmt.Sprintf(" (and %d more retries since the last notice)", q)
	}
	fmt.Fprintf(n.w, "\ndistill: %s: attempt %d of %d failed: %v; retrying in %v%s%s\n",
		r.URL, r.Attempt, r.MaxAttempts, r.Err, r.Wait.Round(time.Millisecond), capped, more)
	n.last[key], n.quiet[key] = now, 0
}
