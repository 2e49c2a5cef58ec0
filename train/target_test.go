package train

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/internal/testmodel"
	"github.com/drafter-ai/drafter/internal/testutil"
	"github.com/drafter-ai/drafter/pkg/target"
)

// TestBodyTunedTargetRefused: a copy of the model whose decoder weights (all
// but the norms) were scaled by 0.9 is another target: data captured from the
// original is refused for it, and so is resuming the original's run on it,
// each error naming both fingerprints.
func TestBodyTunedTargetRefused(t *testing.T) {
	fp := modelFingerprint(t)
	tuned := testutil.CopyDir(t, modelDir)
	testmodel.ScaleBody(t, tuned, 0.9)
	tg, err := target.Open(tuned, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	tunedFP := tg.Fingerprint
	if tunedFP == fp {
		t.Fatalf("the body-tuned copy has the original's fingerprint %s", fp)
	}
	samples := distil(t, 3)
	tmp := t.TempDir()
	origData, tunedData := filepath.Join(tmp, "orig"), filepath.Join(tmp, "tuned")
	writeCapture(t, origData, fp, samples, []int{1, 3, 5}, true)
	writeCapture(t, tunedData, tunedFP, samples, []int{1, 3, 5}, true)
	wantAll := func(what string, err error, wants ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: accepted", what)
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", what, err, w)
			}
		}
	}

	_, err = Run(context.Background(), Options{Method: smallMedusa(), Model: tuned, Data: []string{origData},
		Out: filepath.Join(tmp, "out-data")})
	wantAll("data from the original", err, origData, "another model", fp, tunedFP)

	out := filepath.Join(tmp, "out")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = Run(ctx, Options{Method: smallMedusa(), Model: modelDir, Data: []string{origData}, Out: out,
		Progress: &cancelOn{text: "eval ", cancel: cancel}})
	if err == nil {
		t.Fatal("the run to resume was not interrupted")
	}
	_, err = Run(context.Background(), Options{Method: smallMedusa(), Model: tuned, Data: []string{tunedData}, Out: out,
		Resume: true})
	wantAll("resume on the tuned copy", err, "cannot resume", "target fingerprint (--model): was \""+fp+"\", now \""+tunedFP+"\"")
}
