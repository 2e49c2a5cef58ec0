package generate

import "fmt"

// JobError is a failure of one job of Engine.Run (a NaN in the model's
// logits, say), so that the caller can name the prompt the job came from.
type JobError struct {
	// Job is the job's index in the jobs given to Run; Token the number of
	// tokens it had generated.
	Job, Token int
	Err        error
}

func (e *JobError) Error() string {
	return fmt.Sprintf("generate: job %d, token %d: %v", e.Job, e.Token, e.Err)
}

// Unwrap returns the cause.
func (e *JobError) Unwrap() error { return e.Err }
