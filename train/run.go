package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/exportcheck"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/outlock"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/pkg/tensor/cpu"
	"github.com/drafter-ai/drafter/train/loop"
	"github.com/drafter-ai/drafter/train/optim"
)

// The files of the output folder besides the exports.
const (
	// ArgsFile records the settings a resume must repeat (loop.ArgsFile).
	ArgsFile = loop.ArgsFile
	// CheckpointFile is the resumable training state (loop.CheckpointFile).
	CheckpointFile = loop.CheckpointFile
	// ProvenanceFile is drafter.json, which the method's export writes at
	// the top of the output folder.
	ProvenanceFile = drafters.ProvenanceFile
)

// Options is one `drafter train` run.
type Options struct {
	// Method is the method to train, with its settings: a medusa.Options
	// (train/medusa) or an eagle3.Options (train/eagle3), values.
	Method loop.Method
	// Model is the target checkpoint folder; Data the capture directories made
	// from it; Out the output folder (created if needed).
	Model string
	Data  []string
	Out   string
	// Resume continues the run whose checkpoint is in Out. Without it, an Out
	// holding a checkpoint is refused.
	Resume bool
	// VerifyData verifies every shard of Data again, ignoring Cache. Shards
	// are always verified before training (size and SHA-256 against the
	// manifest, every state finite); Cache spares reading a shard unchanged
	// since it was last verified.
	VerifyData bool
	// Cache remembers the target's tensor digests and the verified shards
	// between runs (nil: none); the command passes the user's cache folder.
	Cache *filecache.Cache
	// Progress receives the progress bar and evaluation lines; nil is quiet.
	Progress io.Writer
	// Notes receives what the user must see even when quiet (resuming from
	// a checkpoint that has no checksum); nil discards it.
	Notes io.Writer
	// Args are the command-line arguments as given (flag name to value), for
	// drafter.json.
	Args map[string]string
	// Device runs the trainer (nil: the CPU device).
	Device tensor.Device
	// Precision is the arithmetic of the trainer's products on Device
	// (PrecisionAuto: bf16 tensor cores on a GPU, float32 on the CPU).
	Precision Precision
}

// Result is what Run did.
type Result struct {
	// Method is the method trained.
	Method drafters.Kind
	// Out is the output folder; Exports the export folders written in it.
	Out     string
	Exports []string
	// Steps are the optimiser steps taken in total (including before a resume).
	Steps int
	// Provenance is what drafter.json holds.
	Provenance map[string]any
	// Trainer is the method's own result (*medusa.Result, *eagle3.Result).
	Trainer any
}

// Run trains the drafter opt describes; see the package documentation.
func Run(ctx context.Context, opt Options) (*Result, error) {
	m := opt.Method
	if m == nil {
		return nil, errors.New("train: no method given (medusa or eagle3)")
	}
	if opt.Model == "" || opt.Out == "" {
		return nil, errors.New("train: --model and --out are required")
	}
	lock, err := outlock.Acquire(opt.Out, "drafter train")
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	defer lock.Release()
	dev := opt.Device
	if dev == nil {
		dev = cpu.New(nil)
	}
	dev, products, err := TrainingDevice(dev, opt.Precision)
	if err != nil {
		return nil, err
	}
	ckpt := filepath.Join(opt.Out, CheckpointFile)
	_, err = os.Stat(ckpt)
	if err == nil && !opt.Resume {
		return nil, fmt.Errorf("train: %s already holds a training run (%s): pass --resume to continue it, or choose another --out", opt.Out, CheckpointFile)
	}
	// A resume without a checkpoint would train from step 0 and replace
	// the exports in Out, the opposite of what --resume asks for.
	if errors.Is(err, os.ErrNotExist) && opt.Resume {
		return nil, fmt.Errorf("train: --resume: there is no checkpoint to resume from: %s does not exist (nothing was trained into %s yet, "+
			"or the run was stopped before its first checkpoint); run without --resume to start training from the beginning", ckpt, opt.Out)
	}

	tg, err := target.Open(opt.Model, opt.Cache)
	if err != nil {
		return nil, err
	}
	defer tg.Close()
	cols, err := m.Columns(tg.Config)
	if err != nil {
		return nil, err
	}
	need := Needs{Method: string(m.Kind()), FinalNorm: true, Layers: cols.FeatureLayers, LayersFromFlag: cols.FromFlag, LayerName: cols.LayerName}
	start := time.Now()
	td, err := openData(opt.Data, tg.Fingerprint, tg.Config.HiddenSize, need,
		capture.DatasetOptions{Cache: opt.Cache, Recheck: opt.VerifyData}, cols.FeatureLayers)
	if err != nil {
		return nil, err
	}
	defer td.ds.Close()
	dirs, ds, data := td.dirs, td.ds, td.data
	rep := loop.NewReporter(opt.Progress)
	defer rep.Finish()
	rep.Line(verifiedLine(ds.Verified(), time.Since(start)))
	if note := unsealedNote(dirs); note != "" && opt.Notes != nil {
		fmt.Fprintln(opt.Notes, note)
	}
	if opt.Resume {
		if note := optim.CheckpointNote(ckpt); note != "" && opt.Notes != nil {
			fmt.Fprintln(opt.Notes, note)
		}
	}
	captures := make([]loop.Capture, len(dirs))
	manifests := make(map[string]string, len(dirs))
	for i, d := range dirs {
		captures[i] = loop.Capture{Dir: d.Dir, ManifestSHA256: d.ManifestSHA256, Manifest: d.Manifest}
		manifests[filepath.Join(d.Dir, capture.ManifestName)] = d.ManifestSHA256
	}
	// The method completes the settings record before the loop writes it,
	// and before the export writes drafter.json.
	set := &loop.Settings{TargetFingerprint: tg.Fingerprint, Data: captures}
	args := map[string]any{
		"command":  opt.Args,
		"model":    opt.Model,
		"data":     td.folders,
		"out":      opt.Out,
		"settings": set,
		"products": products.String(),
	}
	job := loop.Job{Out: opt.Out, Settings: set, Report: rep,
		Provenance: loop.Provenance{BaseModel: tg.Name(), TargetFingerprint: tg.Fingerprint, DataManifests: manifests, Args: args,
			TargetLayers: tg.Config.NumLayers}}
	out, err := m.Train(ctx, &loop.Setup{Target: tg, Captures: captures, Data: data, Device: dev, Resume: opt.Resume, Job: job})
	if err != nil {
		return nil, err
	}
	rep.Finish()
	if err := checkExports(opt.Out, out.Exports, tg.Config.NumLayers); err != nil {
		return nil, err
	}
	rep.Line(fmt.Sprintf("trained %d steps over %d epochs (%s); exports in %s", out.Steps, out.Epochs, out.Stopped, strings.Join(out.Exports, ", ")))
	prov, err := readJSONMap(filepath.Join(opt.Out, ProvenanceFile))
	if err != nil {
		return nil, err
	}
	return &Result{Method: m.Kind(), Out: opt.Out, Exports: out.Exports, Steps: out.Steps, Provenance: prov, Trainer: out.Result}, nil
}

// checkExports checks each export folder the method wrote against the
// loading rules of every serving engine its layout targets
// (pkg/exportcheck). On a mismatch it removes what the export wrote (the
// folders, drafter.json, SHA256SUMS: an export an engine would load and run
// wrong must not be left to be served) and returns the findings; the
// checkpoint stays, so the run can be looked into. Notes do not fail the
// run and are not shown: drafter check-export prints them.
func checkExports(out string, exports []string, targetLayers int) error {
	var lines []string
	failed := false
	for _, dir := range exports {
		r, err := exportcheck.Check(dir, exportcheck.Options{TargetLayers: targetLayers})
		if errors.Is(err, exportcheck.ErrNoExport) {
			// A method exportcheck has no engine rules for.
			continue
		}
		if err != nil {
			return fmt.Errorf("train: checking the export: %w", err)
		}
		failed = failed || r.Failed()
		lines = append(lines, r.Lines()...)
	}
	if !failed {
		return nil
	}
	var errs []error
	for _, dir := range exports {
		errs = append(errs, os.RemoveAll(dir))
	}
	for _, f := range []string{ProvenanceFile, drafters.SumsFile} {
		if err := os.Remove(filepath.Join(out, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	var bad []string
	for _, l := range lines {
		if strings.HasPrefix(l, string(exportcheck.Error)+":") {
			bad = append(bad, l)
		}
	}
	err := fmt.Errorf("train: the export breaks a serving engine's loading rules, so it was removed (%s); the checkpoint in %s is kept:\n  %s",
		strings.Join(exports, ", "), out, strings.Join(bad, "\n  "))
	return errors.Join(append([]error{err}, errs...)...)
}

func readJSONMap(path string) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("train: %s: %w", path, err)
	}
	return m, nil
}

// unsealedNote returns one line naming the captures whose manifest predates
// manifest checksums ("" when there is none): they were only cross-checked
// (capture.ReadManifest), which the user should know once, not per read.
func unsealedNote(dirs []DataDir) string {
	var paths []string
	for _, d := range dirs {
		if !d.Manifest.Checksummed() {
			paths = append(paths, filepath.Join(d.Dir, capture.ManifestName))
		}
	}
	if len(paths) == 0 {
		return ""
	}
	return fmt.Sprintf("note: %s %s written by an older drafter and %s no checksum: training on %s after checking only that the fields recorded twice agree",
		strings.Join(paths, ", "), plural(len(paths), "was", "were"), plural(len(paths), "has", "have"), plural(len(paths), "it", "them"))
}

// plural returns one or many by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// verifiedLine says what verifying the data took.
func verifiedLine(st capture.VerifyStats, took time.Duration) string {
	s := fmt.Sprintf("data: %d shards verified", st.Shards)
	if st.Read > 0 {
		s += fmt.Sprintf(", %d read (%.1f MiB in %s, %.2f GB/s)", st.Read, float64(st.Bytes)/(1<<20),
			took.Round(time.Millisecond), float64(st.Bytes)/1e9/max(took.Seconds(), 1e-9))
	}
	if st.Cached > 0 {
		s += fmt.Sprintf(", %d unchanged since verified", st.Cached)
	}
	return s
}
