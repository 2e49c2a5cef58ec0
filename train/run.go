package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/pkg/atomicfile"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/filecache"
	"github.com/drafter-ai/drafter/pkg/outlock"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/eagle3"
	"github.com/drafter-ai/drafter/train/medusa"
	"github.com/drafter-ai/drafter/train/optim"
)

// Methods.
const (
	MethodMedusa = "medusa"
	MethodEAGLE3 = "eagle3"
)

// Files Run writes into the output folder besides the trainers' own.
const (
	// ArgsFile records the settings a resume must repeat; it is written before
	// training starts.
	ArgsFile = "train_args.json"
	// ProvenanceFile is drafter.json.
	ProvenanceFile = "drafter.json"
	// CheckpointFile is the trainers' resumable state.
	CheckpointFile = "checkpoint.safetensors"
)

// Options is one `drafter train` run.
type Options struct {
	// Method is MethodMedusa or MethodEAGLE3.
	Method string
	// Model is the target checkpoint folder; Data the capture directories made
	// from it; Out the output folder (created if needed).
	Model string
	Data  []string
	Out   string
	// Medusa is the Medusa trainer's configuration (start from
	// medusa.DefaultConfig); Resume and Progress are set by Run.
	Medusa medusa.Config
	// DType is the Medusa export dtype: "F32" (default), "BF16" or "F16".
	DType string
	// EAGLE3 is the EAGLE-3 trainer's configuration (start from
	// eagle3.DefaultConfig); Target, Export, Provenance, Resume and Progress
	// are set by Run.
	EAGLE3 eagle3.Config
	// Layers overrides the EAGLE-3 feature layers (3 Hugging Face hidden_states
	// indices); nil uses the target's defaults (see eagle3FeatureLayers).
	Layers []int
	// Format is the EAGLE-3 export layout: deagle3.FormatNative (default) or
	// deagle3.FormatSpeculators.
	Format string
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
	// Args are the command-line arguments as given (flag name to value), for
	// drafter.json.
	Args map[string]string
	// Backend runs the matrix products; nil means tensor.CPU().
	Backend tensor.Backend
}

// Result is what Run did.
type Result struct {
	Method string
	// Out is the output folder; Exports the export folders written in it.
	Out     string
	Exports []string
	// Steps are the optimiser steps taken in total (including before a resume).
	Steps int
	// Provenance is what drafter.json holds.
	Provenance map[string]any
	// Medusa or EAGLE3 is the trainer's own result.
	Medusa *medusa.Result
	EAGLE3 *eagle3.Result
}

// Run trains the drafter opt describes; see the package documentation.
func Run(ctx context.Context, opt Options) (*Result, error) {
	if opt.Method != MethodMedusa && opt.Method != MethodEAGLE3 {
		return nil, fmt.Errorf("train: --method must be %s or %s, got %q", MethodMedusa, MethodEAGLE3, opt.Method)
	}
	if opt.Model == "" || opt.Out == "" {
		return nil, errors.New("train: --model and --out are required")
	}
	lock, err := outlock.Acquire(opt.Out, "drafter train")
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	defer lock.Release()
	be := opt.Backend
	if be == nil {
		be = tensor.CPU()
	}
	ckpt := filepath.Join(opt.Out, CheckpointFile)
	if _, err := os.Stat(ckpt); err == nil && !opt.Resume {
		return nil, fmt.Errorf("train: %s already holds a training run (%s): pass --resume to continue it, or choose another --out", opt.Out, CheckpointFile)
	}

	tg, err := target.Open(opt.Model, opt.Cache)
	if err != nil {
		return nil, err
	}
	defer tg.Close()
	need := Needs{Method: opt.Method, FinalNorm: true}
	var layers [3]int
	var defaultLayers bool
	if opt.Method == MethodEAGLE3 {
		if layers, defaultLayers, err = eagle3FeatureLayers(tg.Config, opt.Layers); err != nil {
			return nil, err
		}
		need.Layers, need.LayersFromFlag = layers[:], opt.Layers != nil
	} else if opt.Layers != nil {
		return nil, errors.New("train: feature layers are an EAGLE-3 setting; Medusa reads the final-norm state only")
	}
	dirs, err := CheckData(opt.Data, tg.Fingerprint, tg.Config.HiddenSize, need)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ds, err := capture.OpenDatasetWith(capture.DatasetOptions{Cache: opt.Cache, Recheck: opt.VerifyData}, opt.Data...)
	if err != nil {
		return nil, fmt.Errorf("train: --data: %w", err)
	}
	defer ds.Close()
	rep := newReporter(opt.Progress)
	defer rep.finish()
	rep.line(verifiedLine(ds.Verified(), time.Since(start)))

	if opt.Method == MethodEAGLE3 && opt.EAGLE3.TargetTemperature == 0 {
		if opt.EAGLE3.TargetTemperature, err = dataTargetTemperature(dirs); err != nil {
			return nil, err
		}
	}
	set, err := newSettings(opt, tg, dirs, layers)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return nil, fmt.Errorf("train: creating --out: %w", err)
	}
	if err := checkResume(opt, set); err != nil {
		return nil, err
	}
	if opt.Resume {
		if note := optim.CheckpointNote(ckpt); note != "" {
			rep.line(note)
		}
	}
	if err := atomicfile.WriteJSON(filepath.Join(opt.Out, ArgsFile), set); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}

	manifests := make(map[string]string, len(dirs))
	for _, d := range dirs {
		manifests[filepath.Join(d.Dir, capture.ManifestName)] = d.ManifestSHA256
	}
	args := map[string]any{
		"command":  opt.Args,
		"model":    opt.Model,
		"data":     opt.Data,
		"out":      opt.Out,
		"settings": set,
	}
	res := &Result{Method: opt.Method, Out: opt.Out}

	var featureLayers []int
	if opt.Method == MethodEAGLE3 {
		featureLayers = layers[:]
	}
	data, err := NewCaptureData(ds, featureLayers)
	if err != nil {
		return nil, err
	}
	embed, lmHead, err := tg.OutputLayers(opt.Method == MethodEAGLE3)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	// The trainers hold float32 copies: unmap the checkpoint, which the
	// fingerprint read through, for the rest of the run.
	if err := tg.Close(); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	switch opt.Method {
	case MethodMedusa:
		cfg := opt.Medusa
		cfg.Resume, cfg.Progress = opt.Resume, rep.medusa
		mr, err := medusa.Train(ctx, cfg, medusa.Target{Vocab: tg.Config.VocabSize, LMHead: lmHead}, data, be, opt.Out)
		if err != nil {
			return nil, interrupted(ctx, opt, err)
		}
		rep.finish()
		info := dmedusa.ExportInfo{BaseModel: tg.Name(), TargetFingerprint: tg.Fingerprint, DataManifests: manifests,
			Args: args, Metrics: mr.Best, DType: safetensors.DType(strings.ToUpper(opt.DType))}
		if err := dmedusa.Export(opt.Out, mr.Heads, info); err != nil {
			return nil, err
		}
		res.Medusa, res.Steps = mr, mr.Steps
		res.Exports = []string{filepath.Join(opt.Out, dmedusa.VLLMDir), filepath.Join(opt.Out, dmedusa.MedusaDir)}
		rep.line(fmt.Sprintf("trained %d steps (%s); exports in %s", mr.Steps, mr.Stopped, strings.Join(res.Exports, ", ")))

	case MethodEAGLE3:
		cfg := opt.EAGLE3
		cfg.Target, cfg.Resume, cfg.Progress = eagle3Target(tg.Config, embed, lmHead), opt.Resume, rep.eagle3
		cfg.Export = deagle3.ExportOptions{Format: opt.Format, LayerIDs: layers[:], DefaultLayers: defaultLayers,
			TargetName: tg.Name(), TargetArchitectures: tg.Config.Architectures}
		cfg.Provenance = eagle3.Provenance{BaseModel: tg.Name(), TargetFingerprint: tg.Fingerprint, DataManifests: manifests, Args: args}
		er, err := eagle3.Train(ctx, cfg, data, be, opt.Out)
		if err != nil {
			return nil, interrupted(ctx, opt, err)
		}
		rep.finish()
		res.EAGLE3, res.Steps = er, er.Steps
		res.Exports = []string{er.ExportDir}
		rep.line(fmt.Sprintf("trained %d steps over %d epochs (%s); export in %s", er.Steps, er.Epochs, er.Stopped, er.ExportDir))
	}
	// Both trainers write drafter.json at the top of the output folder.
	res.Provenance, err = readJSONMap(filepath.Join(opt.Out, ProvenanceFile))
	if err != nil {
		return nil, err
	}
	return res, nil
}

// interrupted turns a trainer error after cancellation into one that says how
// to continue.
func interrupted(ctx context.Context, opt Options, err error) error {
	if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("train: interrupted; the checkpoint in %s keeps the progress: run the same command with --resume to continue (%w)", opt.Out, err)
}

// settings are the result-affecting choices of a run: a resume must repeat
// them. Data directories are compared by manifest hash, in order (a capture
// may move; its content and the sample numbering may not change).
type settings struct {
	Method            string         `json:"method"`
	TargetFingerprint string         `json:"target_fingerprint"`
	Data              []DataDir      `json:"data"`
	FeatureLayers     []int          `json:"feature_layers,omitempty"`
	Trainer           map[string]any `json:"trainer"`
	// unrecorded holds the values of trainer settings that a record made by
	// an older build may lack (what that build used), so that its runs resume.
	unrecorded map[string]any
}

// notCompared reports the trainer settings a resume may change: they do not
// alter the trained weights (max_steps only cuts a run short; the trainers keep
// the schedule of the epoch cap).
func notCompared(key string) bool {
	switch key {
	case "resume", "max_steps", "checkpoint_every", "log_every":
		return true
	}
	return false
}

func newSettings(opt Options, tg *target.Target, dirs []DataDir, layers [3]int) (*settings, error) {
	s := &settings{Method: opt.Method, TargetFingerprint: tg.Fingerprint, Data: dirs}
	var v any
	switch opt.Method {
	case MethodMedusa:
		v = opt.Medusa
	case MethodEAGLE3:
		s.FeatureLayers = layers[:]
		v = opt.EAGLE3
		// No --intermediate is the target's width, as in every run before
		// it; those runs trained toward the plain softmax.
		s.unrecorded = map[string]any{"intermediate_size": tg.Config.IntermediateSize, "target_temperature": 1}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("train: encoding the trainer settings: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&s.Trainer); err != nil {
		return nil, fmt.Errorf("train: decoding the trainer settings: %w", err)
	}
	for k, v := range s.unrecorded {
		if _, ok := s.Trainer[k]; !ok {
			s.Trainer[k] = v
		}
	}
	return s, nil
}

// checkResume refuses a resume whose settings differ from the first run's,
// listing every difference.
func checkResume(opt Options, now *settings) error {
	if !opt.Resume {
		return nil
	}
	path := filepath.Join(opt.Out, ArgsFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(opt.Out, CheckpointFile)); err == nil {
			return fmt.Errorf("train: cannot resume: %s has a checkpoint but no %s recording the run's settings", opt.Out, ArgsFile)
		}
		return nil // nothing to resume: a fresh run
	}
	if err != nil {
		return fmt.Errorf("train: cannot resume: %w", err)
	}
	var old settings
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&old); err != nil {
		return fmt.Errorf("train: cannot resume: %s: %w", path, err)
	}
	for k, v := range now.unrecorded {
		if _, ok := old.Trainer[k]; !ok && old.Trainer != nil {
			old.Trainer[k] = v
		}
	}
	diffs := diffSettings(&old, now)
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("train: cannot resume the run in %s with different settings (a resumed run must end exactly as an uninterrupted one):\n  %s\nrepeat the first run's arguments, or train into another --out",
		opt.Out, strings.Join(diffs, "\n  "))
}

func diffSettings(old, now *settings) []string {
	var diffs []string
	add := func(what string, a, b any) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			diffs = append(diffs, fmt.Sprintf("%s: was %s, now %s", what, ja, jb))
		}
	}
	add("method", old.Method, now.Method)
	add("target fingerprint (--model)", old.TargetFingerprint, now.TargetFingerprint)
	hashes := func(ds []DataDir) []string {
		h := make([]string, len(ds))
		for i, d := range ds {
			h[i] = d.Dir + " (manifest sha256 " + d.ManifestSHA256 + ")"
		}
		return h
	}
	oh, nh := hashes(old.Data), hashes(now.Data)
	same := len(old.Data) == len(now.Data)
	for i := 0; same && i < len(old.Data); i++ {
		same = old.Data[i].ManifestSHA256 == now.Data[i].ManifestSHA256
	}
	if !same {
		diffs = append(diffs, fmt.Sprintf("--data: was %s, now %s", strings.Join(oh, ", "), strings.Join(nh, ", ")))
	}
	add("feature layers (--layers)", old.FeatureLayers, now.FeatureLayers)
	keys := map[string]bool{}
	for k := range old.Trainer {
		keys[k] = true
	}
	for k := range now.Trainer {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		if !notCompared(k) {
			sorted = append(sorted, k)
		}
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		add(k, old.Trainer[k], now.Trainer[k])
	}
	return diffs
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
