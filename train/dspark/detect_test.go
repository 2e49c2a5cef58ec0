package dspark

import (
	"context"
	"testing"

	"github.com/drafter-ai/drafter/eval"
	ddspark "github.com/drafter-ai/drafter/pkg/drafters/dspark"
	"github.com/drafter-ai/drafter/train/loop"
)

// drafter eval finds a DSpark training output in either layout among every
// method's (eval.Detect over methods.All), with its drafter.json and sums.
func TestEvalDetects(t *testing.T) {
	for _, format := range []string{ddspark.FormatDeepSpec, ddspark.FormatSpeculators} {
		o := DefaultOptions()
		o.BlockSize, o.MarkovRank, o.Anchors, o.Epochs, o.Format = 4, 3, 2, 1, format
		out := t.TempDir()
		if _, err := Train(context.Background(), o, tinyInputs(3), &loop.Job{Out: out}); err != nil {
			t.Fatal(err)
		}
		info, err := eval.Detect(out)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if info.Kind != ddspark.Kind || info.Layout != format || info.Provenance == "" {
			t.Fatalf("%s: detected %+v", format, info)
		}
	}
}
