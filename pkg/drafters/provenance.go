package drafters

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// ProvenanceFile is drafter.json, the record a training run writes at the
// top of its output folder: the target's fingerprint, the method and its
// shape, the data and the arguments.
const ProvenanceFile = "drafter.json"

// Provenance is a drafter.json found for an export.
type Provenance struct {
	// Path is the file; Data its JSON.
	Path string
	Data []byte
}

// Decode unmarshals the record into v, naming the file on error.
func (p *Provenance) Decode(v any) error {
	if err := json.Unmarshal(p.Data, v); err != nil {
		return fmt.Errorf("drafter provenance %s: %w", p.Path, err)
	}
	return nil
}

// Common is what every method's drafter.json records of its drafter: the
// method and the target's sizes (nil where it records none).
type Common struct {
	Method *string `json:"method"`
	Hidden *int    `json:"hidden_size"`
	Vocab  *int    `json:"vocab_size"`
}

// Recorded is one thing drafter.json and the export both say: Key is
// drafter.json's key, Recorded its value there (nil when drafter.json does
// not record it: such a field is not compared), Export the export's and File
// the export file that says it.
type Recorded struct {
	Key      string
	Recorded any
	Export   any
	File     string
}

// Value returns *v, or nil when v is nil: a field drafter.json leaves out.
func Value[T any](v *T) any {
	if v == nil {
		return nil
	}
	return *v
}

// Agree returns an error naming drafter.json, the export file and the field
// at the first field where the two disagree, nil when they all agree. An
// older drafter.json, or one written by hand, may lack any field.
func (p *Provenance) Agree(fields []Recorded) error {
	for _, f := range fields {
		if f.Recorded == nil || reflect.DeepEqual(f.Recorded, f.Export) {
			continue
		}
		return fmt.Errorf("%s records %s %s, but the export %s has %s: they describe different drafters (an export from another run beside this drafter.json, or one edited since); evaluate the export with the drafter.json its training run wrote",
			p.Path, f.Key, show(f.Recorded), f.File, show(f.Export))
	}
	return nil
}

// show formats a recorded value; a nil list of feature layers means the
// engines' defaults.
func show(v any) string {
	if ids, ok := v.([]int); ok && ids == nil {
		return "none (the engines' default feature layers)"
	}
	return fmt.Sprintf("%v", v)
}
