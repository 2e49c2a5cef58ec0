package loop

import (
	"encoding/json"
	"fmt"
)

// state is what a checkpoint carries of the loop beyond the optimiser, the
// best weights and the data position (optim.TrainState), as its "extra"
// JSON.
type state[M any] struct {
	// HaveBest says whether an evaluation ran; BestEval is the best one.
	HaveBest bool `json:"have_best"`
	BestEval M    `json:"best_eval,omitempty"`
	// BadEvals counts the evaluations since the best one.
	BadEvals int `json:"bad_evals"`
	// LastEval is the step of the latest evaluation.
	LastEval int `json:"last_eval_step"`
	// Done says the run ended (other than by its step cap): a resume only
	// exports again.
	Done bool `json:"done"`
	// LossSum and LossCount add up the training losses since the latest
	// evaluation.
	LossSum   float64 `json:"loss_sum"`
	LossCount int     `json:"loss_count"`
	// PlanSteps is the number of steps the run's schedule spans (the sum
	// of Plan.EpochSteps). A resume whose plan spans another number (an
	// epoch cap or batch chosen from the data by another build's rule) is
	// refused: it would change the learning-rate schedule mid-run.
	// Checkpoints written before it existed lack it (0) and are not checked.
	PlanSteps int `json:"plan_steps,omitempty"`
}

// legacyState holds the fields that checkpoints written by each trainer's
// own loop, before this one, name otherwise: EAGLE-3's "bad" (BadEvals) and
// Medusa's "completed" (Done). Their other fields are the ones above, or the
// best evaluation's loss, which BestEval holds too.
type legacyState struct {
	Bad       int  `json:"bad"`
	Completed bool `json:"completed"`
}

// readLegacy completes s from the legacy fields of extra, the JSON s was
// decoded from.
func (s *state[M]) readLegacy(extra []byte) error {
	var l legacyState
	if err := json.Unmarshal(extra, &l); err != nil {
		return fmt.Errorf("train: decoding the checkpoint's loop state: %w", err)
	}
	s.BadEvals = max(s.BadEvals, l.Bad)
	s.Done = s.Done || l.Completed
	return nil
}
