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
// uninterrupted one and writes the same bytes.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

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
}

// runRemote is Run with opt.Generator set; p is what prepare resolved.
func runRemote(ctx context.Context, t *target.Target, opt Options, p *plan, start time.Time) (*Summary, error) {
	gopts := *opt.Generator
	if opt.Progress != nil && gopts.OnRetry == nil {
		gopts.OnRetry = newRetryNotices(opt.Progress, 5*time.Second).note
	}
	client, err := completions.New(gopts)
	if err != nil {
		return nil, fmt.Errorf("distill: --generator: %w", err)
	}
	m, items, sum := t.Model, p.items, p.sum
	gopt := client.Options()
	request := func(it *item) (completions.Request, error) {
		sp := p.settings.Params
		r := completions.Request{Key: uint64(it.id), Prompt: it.ids, MaxTokens: it.budget, Seed: sampleSeed(opt.Seed, it.prompt.Index, it.k),
			Sampling: completions.Sampling{Temperature: sp.Temperature, TopP: sp.TopP, TopK: sp.TopK, MinP: sp.MinP}, Stop: t.Stop}
		if gopt.API == completions.TGI {
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
	var info completions.Info
	if len(items) > 0 {
		probe, err := request(&items[0])
		if err != nil {
			return nil, err
		}
		got, err := client.Connect(ctx, probe)
		if err != nil {
			return nil, fmt.Errorf("distill: --generator: %w", err)
		}
		info = *got
		for _, w := range info.Warnings {
			if opt.Progress != nil {
				fmt.Fprintf(opt.Progress, "distill: warning: %s\n", w)
			}
		}
	}
	man := p.man
	man.Args["generator_api"] = string(gopt.API)
	man.Args["generator_model"] = info.Model
	man.Args["generator_token_ids"] = string(info.Source)
	man.Generation.(map[string]any)["generator"] = info
	man.Generation.(map[string]any)["seeds"] = seedRule
	out, err := openOutput(opt.Out, man, opt.Force)
	if err != nil {
		return nil, fmt.Errorf("distill: %w", err)
	}
	done := len(out.done)
	sum.Resumed = done
	restart := done / opt.Batch * opt.Batch // first usable sample of the group to prefill again
	stored, err := readStored(opt.Out, restart, out.manifest.Totals.Samples)
	if err != nil {
		return nil, err
	}
	var gen *generatedFile
	ses, err := startSession(out, &opt, len(items), func() error { return gen.sync() })
	if err != nil {
		return nil, err
	}
	defer ses.resp.close()
	ses.note = " (and every answer received in " + GeneratedName + ")"
	if gen, err = openGenerated(opt.Out, out.fresh, out.done); err != nil {
		return nil, ses.fail(ctx, err)
	}
	defer gen.close()
	fail := func(err error) (*Summary, error) { return nil, ses.fail(ctx, err) }

	// What is known of each sample: stored, answered before (recorded), or
	// still to ask for. The stored samples must be the first usable ones.
	hashes := make([]string, len(items))
	var todo []int
	var reqs []completions.Request
	firstOpen := len(items) // first sample neither stored nor recorded as skipped
	for i := range items {
		it := &items[i]
		r, err := request(it)
		if err != nil {
			return fail(err)
		}
		hashes[i] = requestHash(r)
		rec, ok := gen.lines[it.id]
		recorded := ok && rec.Request == hashes[i]
		switch {
		case has(out.done, it.id):
			if i > firstOpen {
				return fail(fmt.Errorf("distill: %s stores sample %d but not the earlier sample %d, and %s does not say it was skipped; start over with --force",
					opt.Out, it.id, items[firstOpen].id, GeneratedName))
			}
		case recorded && rec.Skipped != "":
		default:
			firstOpen = min(firstOpen, i)
			if !recorded {
				todo = append(todo, i)
				reqs = append(reqs, r)
			}
		}
	}

	bar := newBar(opt.Progress, "distill", len(items), 0)
	pf := newPrefiller(m, taps(p.layers, m.NumLayers()), p.capacity)
	type member struct {
		it     *item
		ids    []int
		finish string
		store  bool
	}
	group := make([]member, 0, opt.Batch)
	seqs := make([][]int, opt.Batch)
	var tok32 []int32
	var mask []bool
	var writeTime time.Duration
	var requests int
	usable := 0
	skippedUnsynced := false
	flush := func() error {
		// A skip record must reach the disk before a later sample can land
		// in a finished shard: a resume tells skipped samples from lost ones
		// by it. (Usable answers are in responses.jsonl as well.)
		if skippedUnsynced {
			if err := gen.sync(); err != nil {
				return err
			}
			skippedUnsynced = false
		}
		for b, g := range group {
			seqs[b] = append(append(seqs[b][:0], g.it.ids...), g.ids...)
		}
		err := pf.run(seqs[:len(group)], func(b int, states [][]float32) error {
			g := group[b]
			if !g.store {
				return nil // stored before the restart; prefilled again for an identical pass
			}
			t0 := time.Now()
			tok32, mask = tok32[:0], mask[:0]
			for j, id := range seqs[b] {
				tok32 = append(tok32, int32(id))
				mask = append(mask, j >= len(g.it.ids))
			}
			if err := ses.resp.add(response(t, g.it, generate.Done{Tokens: g.ids, Finish: g.finish})); err != nil {
				return err
			}
			if err := ses.w.Write(capture.Sample{ID: g.it.id, Tokens: tok32, LossMask: mask, States: states}); err != nil {
				return promptError(opt.Prompts, g.it, err)
			}
			writeTime += time.Since(t0)
			return nil
		})
		group = group[:0]
		return err
	}
	// handle takes the samples in order: usable ones join the prefill group.
	handle := func(i int, ids []int, finish, skipped string) error {
		it := &items[i]
		if bar != nil {
			el := time.Since(start).Seconds()
			bar.Describe(fmt.Sprintf("distill %.1f req/s %.0f tok/s", float64(requests)/el, float64(sum.Generated)/el))
			bar.Add(1)
		}
		if skipped != "" {
			sum.Rejected++
			skippedUnsynced = true
			if opt.Progress != nil {
				fmt.Fprintf(opt.Progress, "distill: skipping sample %d (%s:%d): %s\n", it.id, opt.Prompts, it.prompt.Line, skipped)
			}
			return nil
		}
		k := usable
		usable++
		if k < restart {
			return nil
		}
		group = append(group, member{it: it, ids: ids, finish: finish, store: k >= done})
		if len(group) == opt.Batch {
			return flush()
		}
		return nil
	}
	next := 0 // next sample to handle
	replayUpTo := func(end int) error {
		for ; next < end; next++ {
			it := &items[next]
			if r, ok := stored[it.id]; ok {
				if err := handle(next, r.ResponseIDs, r.FinishReason, ""); err != nil {
					return err
				}
				continue
			}
			if has(out.done, it.id) { // stored in a group that need not be prefilled again
				if err := handle(next, nil, "", ""); err != nil {
					return err
				}
				continue
			}
			rec := gen.lines[it.id]
			if err := handle(next, rec.IDs, rec.Finish, rec.Skipped); err != nil {
				return err
			}
		}
		return nil
	}
	err = client.Run(ctx, len(todo), func(j int) completions.Request { return reqs[j] }, func(j int, r *completions.Response, rerr error) error {
		i := todo[j]
		if err := replayUpTo(i); err != nil {
			return err
		}
		line, err := answer(t, &items[i], hashes[i], info.Source, r, rerr)
		if err != nil {
			return err
		}
		requests++
		sum.Generated += int64(len(line.IDs))
		if err := gen.add(line); err != nil {
			return err
		}
		next = i + 1
		return handle(i, line.IDs, line.Finish, line.Skipped)
	})
	if err == nil {
		err = replayUpTo(len(items))
	}
	if err == nil && len(group) > 0 {
		err = flush()
	}
	if err != nil {
		return fail(err)
	}
	t0 := time.Now()
	final, err := ses.close(ctx, bar, opt.Progress)
	if err != nil {
		return nil, err
	}
	writeTime += time.Since(t0)
	if err := gen.close(); err != nil {
		return nil, err
	}
	sum.Manifest = final
	sum.Seconds = time.Since(start).Seconds()
	sum.CaptureSeconds = (writeTime + pf.forward).Seconds()
	if opt.Progress != nil {
		fmt.Fprintf(opt.Progress, "distill: %d requests to %s (%s, token ids from %s)\n", requests, info.Model, info.API, info.Source)
		sum.WriteText(opt.Progress)
	}
	return sum, nil
}

// answer turns a server's answer to sample it into its generated.jsonl line:
// ids checked against the model's vocabulary, a text-only answer
// re-tokenized in the context of its prompt, an unusable answer recorded with
// the reason. An answer that contradicts the run (another token-id source,
// ids outside the vocabulary) stops it.
func answer(t *target.Target, it *item, hash string, source completions.Source, r *completions.Response, rerr error) (generatedLine, error) {
	line := generatedLine{ID: it.id, Request: hash}
	if rerr != nil {
		line.Skipped = rerr.Error()
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
func readStored(dir string, from int, n int64) (map[int64]*Response, error) {
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

// openGenerated opens dir/generated.jsonl: empty for a new capture, else read
// and cut after its last complete line (a line torn by a kill is dropped; its
// answer is asked for again).
func openGenerated(dir string, fresh bool, stored map[int64]struct{}) (*generatedFile, error) {
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
	if t, ok := n.last[r.URL]; ok && now.Sub(t) < n.interval {
		n.quiet[r.URL]++
		return
	}
	more := ""
	if q := n.quiet[r.URL]; q > 0 {
		more = fmt.Sprintf(" (and %d more retries since the last notice)", q)
	}
	fmt.Fprintf(n.w, "\ndistill: %s: attempt %d of %d failed: %v; retrying in %v%s\n",
		r.URL, r.Attempt, r.MaxAttempts, r.Err, r.Wait.Round(time.Millisecond), more)
	n.last[r.URL], n.quiet[r.URL] = now, 0
}
