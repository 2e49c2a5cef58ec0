package optim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// MetricsLog appends one JSON object per line to a trainer's metrics.jsonl.
// Every line carries the optimiser step it was written at ("step"), which is
// what lets a resumed run cut the log back to its checkpoint.
type MetricsLog struct {
	f *os.File
	w *bufio.Writer
}

// OpenMetrics creates the metrics log at path. With resume and step > 0 it
// first keeps the existing lines whose "step" is at most step (the step of the
// checkpoint being resumed) and drops the rest, which an interrupted run wrote
// after its last checkpoint and a resumed run writes again; the log then reads
// as one uninterrupted run. Otherwise any existing log is truncated.
func OpenMetrics(path string, step int, resume bool) (*MetricsLog, error) {
	var keep [][]byte
	if resume && step > 0 {
		old, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("reading metrics log %s: %w", path, err)
		}
		for _, line := range bytes.Split(old, []byte{'\n'}) {
			var s struct {
				Step *int `json:"step"`
			}
			if len(line) > 0 && json.Unmarshal(line, &s) == nil && s.Step != nil && *s.Step <= step {
				keep = append(keep, line)
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating metrics log: %w", err)
	}
	l := &MetricsLog{f: f, w: bufio.NewWriter(f)}
	for _, line := range keep {
		l.w.Write(line)
		l.w.WriteByte('\n')
	}
	if err := l.w.Flush(); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing metrics log %s: %w", path, err)
	}
	return l, nil
}

// Write appends v as one JSON line and flushes it to the file.
func (l *MetricsLog) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding metrics: %w", err)
	}
	l.w.Write(b)
	l.w.WriteByte('\n')
	if err := l.w.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", l.f.Name(), err)
	}
	return nil
}

// Close closes the log.
func (l *MetricsLog) Close() error { return l.f.Close() }
