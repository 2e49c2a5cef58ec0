package distill

import (
	"github.com/drafter-ai/drafter/capture"
)

// storeDepth is how many finished samples may wait for the shard writer
// goroutine while generation goes on; one more is being written.
const storeDepth = 2

// stored is a finished sample on its way to the shard writer goroutine: its
// response line and its rows, copied out of the engine's buffers (which the
// engine reuses once its emit returns).
type stored struct {
	it     *item
	resp   *Response
	ids    []int // resp.ResponseIDs
	tokens []int32
	mask   []bool
	states [][]float32
}

// shardWriter writes a local run's finished samples on a goroutine of its
// own, in the order they were handed to it, each as the synchronous path
// did: its responses.jsonl line, then its shard rows, so that the resume
// guarantees hold (the lines written cover at least the samples the
// manifest lists). Its buffers circulate between the two goroutines through
// free, so that a run in its steady state allocates none.
type shardWriter struct {
	ses    *session
	prompt string // the prompt file, for errors
	in     chan *stored
	free   chan *stored
	done   chan struct{}
	err    error // the first failure; read after done is closed
}

// startShardWriter starts the goroutine over the session's writer and
// responses.
func startShardWriter(ses *session, prompts string) *shardWriter {
	w := &shardWriter{ses: ses, prompt: prompts, in: make(chan *stored, storeDepth),
		free: make(chan *stored, storeDepth+1), done: make(chan struct{})}
	for i := 0; i < storeDepth+1; i++ {
		w.free <- &stored{}
	}
	go w.loop()
	return w
}

// loop writes what arrives until in is closed; after a failure it only
// drains, so that the sender never blocks.
func (w *shardWriter) loop() {
	defer close(w.done)
	for s := range w.in {
		if w.err == nil {
			w.err = w.write(s)
		}
		s.resp, s.it = nil, nil
		w.free <- s
	}
}

// write stores one sample: its response line first, then its rows.
func (w *shardWriter) write(s *stored) error {
	if err := w.ses.resp.add(s.resp); err != nil {
		return err
	}
	if err := w.ses.w.Write(capture.Sample{ID: s.it.id, Tokens: s.tokens, LossMask: s.mask, States: s.states}); err != nil {
		return promptError(w.prompt, s.it, err)
	}
	return nil
}

// buffer returns a free buffer, waiting while every one is queued or being
// written; ok is false when the goroutine has stopped on a failure (then
// Close returns it).
func (w *shardWriter) buffer() (*stored, bool) {
	select {
	case s := <-w.free:
		return s, true
	case <-w.done:
		return nil, false
	}
}

// Close waits for every queued sample to be written and returns the first
// failure.
func (w *shardWriter) Close() error {
	close(w.in)
	<-w.done
	return w.err
}
