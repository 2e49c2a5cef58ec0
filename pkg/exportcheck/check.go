// Package exportcheck checks an exported drafter against the loading rules
// of the serving engines that load it: vLLM, SGLang and TensorRT-LLM. The
// rules are written down here from each engine's own loading code (cited by
// file and function in the comments), independently of drafter's exporters
// (pkg/drafters/eagle3, pkg/drafters/medusa, and the DFlash and DSpark
// exporters): this package reads the export's
// config.json and safetensors header as an engine would, and so catches an
// export that an engine would load without complaint and run wrong — a
// config key it never reads, a default it assumes when a key is absent, a
// tensor it skips or leaves uninitialised, a feature-layer id it shifts, a
// vocabulary map it reads as offsets.
//
// Check reports findings of two levels: an Error is a mismatch (the engine
// would refuse the export, or load it and run another drafter than the
// export describes); a Note is a key an engine silently ignores or
// defaults where that does not change this export's drafter (or does only in
// an engine version the note names). A report with an Error fails.
package exportcheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Engine is a serving engine whose loading rules Check applies.
type Engine string

// The engines Check knows.
const (
	VLLM   Engine = "vllm"
	SGLang Engine = "sglang"
	TRTLLM Engine = "trtllm"
)

// Engines lists every engine, in report order.
func Engines() []Engine { return []Engine{VLLM, SGLang, TRTLLM} }

// ParseEngines reads an --engine value: one engine name or "all".
func ParseEngines(s string) ([]Engine, error) {
	if s == "" || s == "all" {
		return Engines(), nil
	}
	for _, e := range Engines() {
		if string(e) == s {
			return []Engine{e}, nil
		}
	}
	return nil, fmt.Errorf("unknown engine %q: want vllm, sglang, trtllm or all", s)
}

// Level is how much a finding matters.
type Level string

const (
	// Error: the engine refuses the export, or loads it and runs a drafter
	// other than the one the export describes.
	Error Level = "error"
	// Note: the engine ignores or defaults a key without changing this
	// export's drafter, or only in the engine versions the note names.
	Note Level = "note"
)

// Finding is one rule an export meets or breaks for one or more engines.
type Finding struct {
	Level Level
	// Engines are the engines the finding is about.
	Engines []Engine
	// File is the export file (config.json, a weights file) the finding is
	// about; Key the config key or tensor name in it ("" for the file as a
	// whole).
	File, Key string
	// Msg says what the engine does and why that matters.
	Msg string
}

// String is the finding on one line: level, engines, file, key, message.
func (f Finding) String() string {
	es := make([]string, len(f.Engines))
	for i, e := range f.Engines {
		es[i] = string(e)
	}
	key := f.Key
	if key == "" {
		key = "-"
	}
	return fmt.Sprintf("%s: %s: %s: %s: %s", f.Level, strings.Join(es, ","), f.File, key, f.Msg)
}

// Export is one export folder Check found and the engines it checked it for.
type Export struct {
	// Dir is the folder; Method "eagle3", "dflash", "dspark" or "medusa";
	// Layout the export layout ("native", "speculators", "vllm", "medusa").
	Dir, Method, Layout string
	// Engines are the engines checked: those asked for that load the layout.
	Engines []Engine
}

// Report is what Check found.
type Report struct {
	Exports  []Export
	Findings []Finding
}

// Failed reports whether any finding is an Error.
func (r *Report) Failed() bool {
	return slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Level == Error })
}

// Errors counts the Error findings.
func (r *Report) Errors() int {
	n := 0
	for _, f := range r.Findings {
		if f.Level == Error {
			n++
		}
	}
	return n
}

// Lines returns the findings one per line, errors first.
func (r *Report) Lines() []string {
	out := make([]string, 0, len(r.Findings))
	for _, lv := range []Level{Error, Note} {
		for _, f := range r.Findings {
			if f.Level == lv {
				out = append(out, f.String())
			}
		}
	}
	return out
}

// layout is one export layout: how it is recognised in a folder and checked.
type layout struct {
	method, name string
	// loads lists the engines that load the layout; why says why another
	// engine does not (for an engine asked for by name).
	loads []Engine
	why   map[Engine]string
	check func(c *checker)
}

// detect returns the layout held directly in dir, nil when none.
func detect(dir string) (*layout, error) {
	if fileExists(filepath.Join(dir, fdWeights)) {
		return &medusaFD, nil
	}
	cfgPath := filepath.Join(dir, configFile)
	if !fileExists(cfgPath) {
		return nil, nil
	}
	cfg, err := readConfig(cfgPath)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.str("speculators_model_type") == "dflash":
		return &dflashSpecs, nil
	case cfg.str("speculators_model_type") == "dspark":
		return &dsparkSpecs, nil
	case cfg.has("speculators_model_type"):
		return &eagle3Speculators, nil
	case declaresDSpark(cfg):
		// Before DFlashDraftModel: an export naming both is DSpark's class
		// with DFlash's name, which the DSpark check reports.
		return &dsparkNative, nil
	case slices.Contains(cfg.strs("architectures"), "DFlashDraftModel"):
		return &dflashNative, nil
	case cfg.str("model_type") == "medusa" || slices.Contains(cfg.strs("architectures"), "MedusaModel"):
		return &medusaVLLM, nil
	case slices.ContainsFunc(cfg.strs("architectures"), func(a string) bool { return strings.Contains(strings.ToLower(a), "eagle3") }):
		return &eagle3Native, nil
	}
	return nil, nil
}

// ErrNoExport is wrapped by Check's error for a folder holding no export of
// a layout it has rules for.
var ErrNoExport = errors.New("no export of a known layout")

// Options says what Check checks for.
type Options struct {
	// Engines are the engines to check for (nil: all of them).
	Engines []Engine
	// TargetLayers is the target's num_hidden_layers when the caller knows
	// it (drafter train does), 0 when not; drafter.json's record of it wins.
	// It decides the engines' default feature layers and bounds the ids.
	TargetLayers int
}

// Check checks the export in dir, or every export in dir's subfolders when
// dir is a training run's output folder (drafter train's --out: eagle3/,
// vllm/, medusa/, or a DFlash or DSpark run's export folders), for
// o.Engines. Each export is checked for those of the
// engines that load its layout; an engine named on its own (not all of
// them) that loads none of the exports found is an Error. drafter.json, in
// dir or its parent (where drafter train writes it), is read for what the
// training run recorded: a disagreement with what an engine would run is an
// Error.
//
// An error is returned only when dir cannot be read or holds no export
// (then it wraps ErrNoExport).
func Check(dir string, o Options) (*Report, error) {
	engines := o.Engines
	if len(engines) == 0 {
		engines = Engines()
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("exportcheck: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("exportcheck: %s is not a folder", dir)
	}
	type found struct {
		dir string
		l   *layout
	}
	var exports []found
	l, err := detect(dir)
	if err != nil {
		return nil, err
	}
	single := l != nil
	if single {
		exports = append(exports, found{dir, l})
	} else {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("exportcheck: %w", err)
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			sub := filepath.Join(dir, e.Name())
			l, err := detect(sub)
			if err != nil {
				return nil, err
			}
			if l != nil {
				exports = append(exports, found{sub, l})
			}
		}
	}
	if len(exports) == 0 {
		return nil, fmt.Errorf("exportcheck: %s holds no drafter export (an EAGLE-3, DFlash or DSpark config.json, a vLLM Medusa config.json, or %s), nor do its subfolders: %w", dir, fdWeights, ErrNoExport)
	}
	prov, err := readProvenance(dir)
	if err != nil {
		return nil, err
	}
	// Engines named one by one (not "all") must each load what is here.
	explicit := len(engines) < len(Engines())
	r := &Report{}
	used := map[Engine]bool{}
	for _, ex := range exports {
		c := &checker{dir: ex.dir, prov: prov, targetLayers: o.TargetLayers}
		var es []Engine
		for _, e := range engines {
			if slices.Contains(ex.l.loads, e) {
				es = append(es, e)
				used[e] = true
			} else if single && explicit {
				// One export asked for an engine that does not load it.
				c.add(Error, []Engine{e}, ex.dir, "", ex.l.why[e])
				used[e] = true
			}
		}
		c.engines = es
		if len(es) > 0 {
			ex.l.check(c)
		}
		r.Exports = append(r.Exports, Export{Dir: ex.dir, Method: ex.l.method, Layout: ex.l.name, Engines: es})
		r.Findings = append(r.Findings, c.findings...)
	}
	for _, e := range engines {
		if !used[e] && explicit {
			var why []string
			for _, ex := range exports {
				why = append(why, fmt.Sprintf("%s (%s %s): %s", ex.dir, ex.l.method, ex.l.name, ex.l.why[e]))
			}
			r.Findings = append(r.Findings, Finding{Level: Error, Engines: []Engine{e}, File: dir,
				Msg: "no export here loads in " + string(e) + ": " + strings.Join(why, "; ")})
		}
	}
	r.Findings = merge(r.Findings)
	return r, nil
}

// checker gathers the findings for one export folder.
type checker struct {
	dir string
	// targetLayers is Options.TargetLayers.
	targetLayers int
	engines      []Engine
	prov         *provenance
	findings     []Finding
}

// add records a finding; file is a path (shown relative to nothing: as given).
func (c *checker) add(lv Level, es []Engine, file, key, msg string) {
	c.findings = append(c.findings, Finding{Level: lv, Engines: slices.Clone(es), File: file, Key: key, Msg: msg})
}

// merge folds findings that differ only in their engines into one naming
// them all, keeping the first one's place.
func merge(fs []Finding) []Finding {
	type k struct {
		lv             Level
		file, key, msg string
	}
	at := map[k]int{}
	var out []Finding
	for _, f := range fs {
		kk := k{f.Level, f.File, f.Key, f.Msg}
		if i, ok := at[kk]; ok {
			for _, e := range f.Engines {
				if !slices.Contains(out[i].Engines, e) {
					out[i].Engines = append(out[i].Engines, e)
				}
			}
			continue
		}
		at[kk] = len(out)
		out = append(out, f)
	}
	order := map[Engine]int{VLLM: 0, SGLang: 1, TRTLLM: 2}
	for i := range out {
		sort.Slice(out[i].Engines, func(a, b int) bool { return order[out[i].Engines[a]] < order[out[i].Engines[b]] })
	}
	return out
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
