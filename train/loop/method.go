package loop

import (
	"context"
	"fmt"

	"github.com/drafter-ai/drafter/capture"
	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/drafters"
	"github.com/drafter-ai/drafter/pkg/target"
	"github.com/drafter-ai/drafter/pkg/tensor"
	"github.com/drafter-ai/drafter/train/dataset"
)

// Method is a drafter method as drafter train runs it: its settings (the
// value is the method's options, such as medusa.Options) and how to train
// with them. train.Run calls Columns, checks and opens the data, then Train.
type Method interface {
	// Kind names the method.
	Kind() drafters.Kind
	// Columns checks the settings against the target's config and says
	// which captured states the method reads.
	Columns(c *checkpoint.Config) (Columns, error)
	// Train trains on s and exports into s.Job.Out.
	Train(ctx context.Context, s *Setup) (*Outcome, error)
}

// Columns are the captured states a method reads besides tokens, loss masks
// and the final-norm state.
type Columns struct {
	// FeatureLayers are Hugging Face hidden_states indices (repeats allowed),
	// FromFlag telling whether the user chose them (--layers) rather than
	// the target's defaults.
	FeatureLayers []int
	FromFlag      bool
	// LayerName names feature layer c in messages (EAGLE-3's "low", "middle",
	// "high"); nil numbers them.
	LayerName func(c int) string
}

// Setup is what a method trains with: the opened target, the checked
// captures and their data, and the job.
type Setup struct {
	// Target is the target, opened (its weights mapped, not loaded).
	Target *target.Target
	// Captures are the --data captures, in order; Data reads their samples
	// with the columns the method asked for.
	Captures []Capture
	Data     dataset.Dataset
	// Device runs the trainer: the method computes on a sibling of it.
	Device tensor.Device
	// Resume continues the run in Job.Out.
	Resume bool
	// Job is where to write, with the settings record and the provenance
	// train.Run has filled in so far.
	Job Job
}

// Capture is one checked capture directory.
type Capture struct {
	// Dir is the directory as given.
	Dir string `json:"dir"`
	// ManifestSHA256 is the lowercase hex SHA-256 of its manifest.json.
	ManifestSHA256 string `json:"manifest_sha256"`
	// Manifest is the parsed manifest.
	Manifest *capture.Manifest `json:"-"`
}

// OutputLayers returns the target's lm_head and, with withEmbed, its
// embedding as float32 (target.Target.OutputLayers), then unmaps the
// checkpoint for the rest of the run: the trainer holds its copies.
func (s *Setup) OutputLayers(withEmbed bool) (embed, lmHead []float32, err error) {
	if embed, lmHead, err = s.Target.OutputLayers(withEmbed); err != nil {
		return nil, nil, fmt.Errorf("train: %w", err)
	}
	if err := s.Target.Close(); err != nil {
		return nil, nil, fmt.Errorf("train: %w", err)
	}
	return embed, lmHead, nil
}

// Outcome is what a method's training did.
type Outcome struct {
	// Steps are the steps taken in total, Epochs the epochs started, and
	// Stopped why training ended (Result).
	Steps, Epochs int
	Stopped       string
	// Exports are the export folders written.
	Exports []string
	// Result is the trainer's own result (such as *medusa.Result).
	Result any
}
