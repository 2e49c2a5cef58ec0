package eval

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	deagle3 "github.com/drafter-ai/drafter/pkg/drafters/eagle3"
	dmedusa "github.com/drafter-ai/drafter/pkg/drafters/medusa"
	"github.com/drafter-ai/drafter/pkg/drafters/methods"
	"github.com/drafter-ai/drafter/pkg/model"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/spec"
)

// fakeMethod is a drafter method eval has never heard of: its exports are
// folders holding fake.plain or fake.fancy, and it drafts a chain of the
// newest token repeated. It records what eval hands it.
type fakeMethod struct{ calls *fakeCalls }

// fakeCalls is what the fake method saw.
type fakeCalls struct {
	loadDir, loadLayout, provPath string
	capacity                      int
	starts, proposes, accepts     int
	finishes                      int
	badTaps                       error
}

const fakeKind drafters.Kind = "fake"

func (fakeMethod) Kind() drafters.Kind { return fakeKind }
func (fakeMethod) Layouts() []string   { return []string{"plain", "fancy"} }
func (fakeMethod) Wants() string       { return "fake drafters (fake.plain or fake.fancy)" }
func (fakeMethod) Capture(*checkpoint.Config) drafters.CaptureNeeds {
	return drafters.CaptureNeeds{FinalNorm: true}
}

func (fakeMethod) Detect(dir string) (string, error) {
	for _, l := range []string{"plain", "fancy"} {
		if drafters.FileExists(filepath.Join(dir, "fake."+l)) {
			return l, nil
		}
	}
	return "", nil
}

func (f fakeMethod) Load(dir, layout string, m *model.Model, prov *drafters.Provenance) (drafters.Drafter, error) {
	f.calls.loadDir, f.calls.loadLayout = dir, layout
	if prov != nil {
		f.calls.provPath = prov.Path
	}
	return &fakeDrafter{m: m, calls: f.calls}, nil
}

func (fakeMethod) Shape(d drafters.Decoding, nodes int) string {
	return fmt.Sprintf("fake chain of %d tokens", d.Depth)
}

type fakeDrafter struct {
	m     *model.Model
	calls *fakeCalls
}

func (d *fakeDrafter) Kind() drafters.Kind { return fakeKind }

func (d *fakeDrafter) Configure(c drafters.Decoding) (drafters.Decoding, error) {
	if c.Mode != drafters.ModeChain {
		return c, errors.New("fake drafters draft chains only")
	}
	if c.Depth == 0 {
		c.Depth = 3
	}
	return c, nil
}

func (d *fakeDrafter) NewProposer(c drafters.Decoding, opt drafters.ProposerOptions) (drafters.Proposer, error) {
	d.calls.capacity = opt.Capacity
	return &fakeProposer{m: d.m, calls: d.calls, depth: c.Depth, hits: []drafters.HeadHits{{Head: 0, K: c.HitK}}}, nil
}

// fakeProposer reads tap 1 (a middle layer: the runner adds the final state
// for verification itself) and checks it gets one row of it per position.
type fakeProposer struct {
	m     *model.Model
	calls *fakeCalls
	depth int
	last  int
	hits  []drafters.HeadHits
}

func (p *fakeProposer) Taps() []int   { return []int{1} }
func (p *fakeProposer) MaxNodes() int { return p.depth }

func (p *fakeProposer) checkTap(res *model.Result, rows int) {
	if got := len(res.HiddenOf(0, 0)); got < rows*p.m.HiddenSize() && p.calls.badTaps == nil {
		p.calls.badTaps = fmt.Errorf("tap 1 holds %d values for %d rows", got, rows)
	}
}

func (p *fakeProposer) Start(prompt []int, first int, res *model.Result) error {
	p.calls.starts++
	p.checkTap(res, len(prompt))
	p.last = first
	return nil
}

func (p *fakeProposer) Propose(t *spec.Tree, root int) error {
	p.calls.proposes++
	t.Reset()
	parent := spec.Root
	for range p.depth {
		var err error
		if parent, err = t.Add(p.last, parent, 0, 0); err != nil {
			return err
		}
	}
	return nil
}

func (p *fakeProposer) Accept(rows []int, res *model.Result, tokens []int) error {
	p.calls.accepts++
	p.checkTap(res, len(rows))
	if len(rows) != len(tokens) || rows[0] != 0 {
		return fmt.Errorf("fake: kept rows %v for tokens %v", rows, tokens)
	}
	p.last = tokens[len(tokens)-1]
	return nil
}

func (p *fakeProposer) Finish(out []int) {
	p.calls.finishes++
	p.hits[0].Count += len(out)
}

func (p *fakeProposer) HeadHits() (string, []drafters.HeadHits) { return "fake head", p.hits }

// TestFakeMethodEndToEnd: a method registered only in a test list is
// detected, loaded with its drafter.json, configured and run by eval's runner
// through the interfaces, its statistics reported: eval switches on no kind.
func TestFakeMethodEndToEnd(t *testing.T) {
	m := loadTarget(t)
	ps := testPrompts(t, evalPrompts, 3)
	calls := &fakeCalls{}
	ms := append(methods.All(), fakeMethod{calls})

	root := t.TempDir()
	for _, l := range []string{"fancy", "plain"} {
		os.MkdirAll(filepath.Join(root, l), 0o755)
		if err := os.WriteFile(filepath.Join(root, l, "fake."+l), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeProvenance(t, root, "fp-fake")
	info, err := detect(ms, root)
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != fakeKind || info.Layout != "plain" || info.Dir != filepath.Join(root, "plain") || info.TargetFingerprint != "fp-fake" {
		t.Fatalf("detected %+v; want the fake's preferred layout plain in %s, fingerprint fp-fake", info, filepath.Join(root, "plain"))
	}
	if _, err := Detect(root); err == nil || !strings.Contains(err.Error(), "holds no drafter") {
		t.Fatalf("the methods list without the fake found %v", err)
	}
	d, err := loadDrafter(ms, info, m)
	if err != nil {
		t.Fatal(err)
	}
	if calls.loadDir != info.Dir || calls.loadLayout != "plain" || calls.provPath != filepath.Join(root, "drafter.json") {
		t.Fatalf("Load got dir %s layout %s drafter.json %q", calls.loadDir, calls.loadLayout, calls.provPath)
	}

	if _, err := Run(context.Background(), m, d, ps, Config{Mode: ModeTree}); !errors.As(err, new(*ConfigError)) || !strings.Contains(err.Error(), "fake drafters draft chains only") {
		t.Fatalf("a tree for the fake: %v; want its ConfigError", err)
	}
	rep, err := Run(context.Background(), m, d, ps, Config{Mode: ModeChain, MaxNewTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	if calls.badTaps != nil {
		t.Fatal(calls.badTaps)
	}
	if err := rep.CheckLossless(); err != nil || rep.Lossless.Prompts != len(ps) {
		t.Fatalf("lossless over %d prompts: %v", rep.Lossless.Prompts, err)
	}
	if rep.Drafter.Kind != fakeKind || rep.Drafter.Layout != "plain" || rep.Depth != 3 || rep.TreeNodes != 3 {
		t.Fatalf("report: drafter %+v, depth %d, %d nodes; want the fake's default depth 3", rep.Drafter, rep.Depth, rep.TreeNodes)
	}
	if calls.starts != len(ps) || calls.finishes != len(ps) || calls.proposes != rep.Stats.Steps || calls.accepts == 0 {
		t.Fatalf("proposer calls %+v for %d prompts and %d steps", *calls, len(ps), rep.Stats.Steps)
	}
	if calls.capacity < len(ps[0].Tokens)+12 {
		t.Fatalf("proposer capacity %d for a prompt of %d tokens and 12 new ones", calls.capacity, len(ps[0].Tokens))
	}
	if len(rep.HeadHits) != 1 || rep.HeadHits[0].Count != rep.Speculative.Tokens || rep.HeadHits[0].K != DefaultHitK {
		t.Fatalf("head hits %+v; want the fake's count of %d tokens, k %d", rep.HeadHits, rep.Speculative.Tokens, DefaultHitK)
	}
	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil || !strings.Contains(buf.String(), "fake head") {
		t.Fatalf("report text (%v) lacks the fake's head label:\n%s", err, buf.String())
	}
}

// TestDetectTwoKinds: drafters of two kinds are refused, in subfolders of
// the folder given (as before) and in one folder two methods both recognise
// (which before was read as whichever was checked first).
func TestDetectTwoKinds(t *testing.T) {
	ms := append(methods.All(), fakeMethod{&fakeCalls{}})
	m := loadTarget(t)
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "fake"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "fake", "fake.plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	exp := eagleExport(t, m, root, deagle3.FormatNative, nil)
	_, err := detect(ms, root)
	if err == nil || !strings.Contains(err.Error(), "two kinds") {
		t.Fatalf("a fake drafter and an EAGLE-3 one below %s: %v", root, err)
	}
	if err := os.WriteFile(filepath.Join(exp, "fake.fancy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = detect(ms, exp)
	if err == nil || !strings.Contains(err.Error(), "two kinds") || !strings.Contains(err.Error(), "eagle3 (native layout)") || !strings.Contains(err.Error(), "fake (fancy layout)") {
		t.Fatalf("one folder read by two methods: %v", err)
	}
	// The same with the real methods: an EAGLE-3 export beside Medusa heads
	// in FasterDecoding's layout was read as the Medusa heads.
	med := medusaExport(t, m, 2, 1, safetensors.F32)
	exp = eagleExport(t, m, t.TempDir(), deagle3.FormatNative, nil)
	b, err := os.ReadFile(filepath.Join(med, "medusa", dmedusa.MedusaWeights))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(exp, dmedusa.MedusaWeights), b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Detect(exp)
	if err == nil || !strings.Contains(err.Error(), "medusa (medusa layout) and eagle3 (native layout)") {
		t.Fatalf("EAGLE-3 and Medusa exports in one folder: %v", err)
	}
}

// TestEvalImportsNoMethod: eval's code reaches drafter methods only through
// pkg/drafters and the list in pkg/drafters/methods, and imports no other
// stage.
func TestEvalImportsNoMethod(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/drafter-ai/drafter/"
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			rel, ok := strings.CutPrefix(path, mod)
			if !ok {
				continue
			}
			checked++
			method := strings.HasPrefix(rel, "pkg/drafters/") && rel != "pkg/drafters/methods"
			stage := strings.HasPrefix(rel, "train") || strings.HasPrefix(rel, "capture/distill")
			if method || stage {
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no module import checked")
	}
}
