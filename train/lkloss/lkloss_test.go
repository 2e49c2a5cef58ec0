package lkloss

import (
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		spec      string
		eta       float64
		want      Loss
		canonical string
	}{
		{"", 0, Loss{CE: true}, CE},
		{"ce", 0, Loss{CE: true}, CE},
		{"kl", 0, Loss{LK: tensor.LK{KL: 1}}, KL},
		{" tv ", 0, Loss{LK: tensor.LK{TV: 1}}, TV},
		{"nla", 0, Loss{LK: tensor.LK{NLA: 1}}, NLA},
		{"lk_hybrid", 0, Loss{LK: tensor.LK{Hybrid: 1, Eta: DefaultEta}}, Hybrid},
		{"lk_hybrid", 1.5, Loss{LK: tensor.LK{Hybrid: 1, Eta: 1.5}}, Hybrid},
		{`{"tv":1}`, 0, Loss{LK: tensor.LK{TV: 1}}, TV},
		{`{"tv":0.9,"ce":0.1}`, 0, Loss{LK: tensor.LK{KL: 0.1, TV: 0.9}}, `{"kl":0.1,"tv":0.9}`},
		{`{"kl":0.1, "tv":0.9, "nla":0}`, 0, Loss{LK: tensor.LK{KL: 0.1, TV: 0.9}}, `{"kl":0.1,"tv":0.9}`},
		{`{"lk_hybrid":2,"nla":0.5}`, 4, Loss{LK: tensor.LK{Hybrid: 2, NLA: 0.5, Eta: 4}}, `{"lk_hybrid":2,"nla":0.5}`},
	} {
		got, err := Parse(c.spec, c.eta)
		if err != nil {
			t.Fatalf("Parse(%q, %g): %v", c.spec, c.eta, err)
		}
		if got != c.want {
			t.Fatalf("Parse(%q, %g) = %+v, want %+v", c.spec, c.eta, got, c.want)
		}
		if s := Canonical(got); s != c.canonical {
			t.Fatalf("Canonical(%q) = %s, want %s", c.spec, s, c.canonical)
		}
		// The canonical spelling parses back to the same loss.
		if again, err := Parse(Canonical(got), c.eta); err != nil || again != got {
			t.Fatalf("Parse(Canonical(%q)) = %+v, %v", c.spec, again, err)
		}
	}
	for _, c := range []struct {
		spec string
		eta  float64
		err  string
	}{
		{"cross-entropy", 0, "want one of ce, kl, tv, nla, lk_hybrid"},
		{`{"tv":-1}`, 0, "want a finite weight of 0 or more"},
		{`{"tv":0}`, 0, "no loss has a weight above 0"},
		{`{"js":1}`, 0, `unknown loss "js"`},
		{`{"tv":1} {}`, 0, "not a JSON object"},
		{`{"tv":`, 0, "not a JSON object"},
		{"tv", 3, "does not use it"},
		{"ce", 3, "does not use it"},
		{"lk_hybrid", -1, "want a finite value of 0 or more"},
	} {
		if _, err := Parse(c.spec, c.eta); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Fatalf("Parse(%q, %g): err = %v, want one containing %q", c.spec, c.eta, err, c.err)
		}
	}
}

// TestRecorded: every spelling of one loss records one setting, and η only
// where the hybrid uses it.
func TestRecorded(t *testing.T) {
	for _, c := range []struct {
		spec    string
		eta     float64
		want    string
		wantEta float64
	}{
		{CE, 0, CE, 0},
		{"lk_hybrid", 0, "lk_hybrid", DefaultEta},
		{`{"lk_hybrid":1}`, 2, "lk_hybrid", 2},
		{`{"tv":1}`, 0, "tv", 0},
		{`{"tv":0.9,"kl":0.1}`, 0, `{"kl":0.1,"tv":0.9}`, 0},
	} {
		if got, eta := Recorded(c.spec, c.eta); got != c.want || eta != c.wantEta {
			t.Errorf("Recorded(%q, %g) = %q, %g; want %q, %g", c.spec, c.eta, got, eta, c.want, c.wantEta)
		}
	}
}
