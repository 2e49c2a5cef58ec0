package capture

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// DType is the storage type of the hidden-state columns.
type DType string

// Storage types for hidden states.
const (
	Float16 DType = "float16"
	Float32 DType = "float32"
)

// FormatVersion is the version of the shard and manifest format written by this package.
const FormatVersion = 1

// Column names of the fixed (non-state) columns.
const (
	ColSampleID  = "sample_id"
	ColPosition  = "position"
	ColTokenID   = "token_id"
	ColLossMask  = "loss_mask"
	ColFinalNorm = "final_norm"
)

// LayerConvention states in words what the layer indices and column names mean. It is
// written into every manifest and every shard's schema metadata.
const LayerConvention = "hidden_<k> is Hugging Face Transformers hidden_states index k: " +
	"0 = embedding output, k >= 1 = residual stream after decoder layer k-1 (0-based), " +
	"before the final norm (for k = num_layers too, unlike the last element of the Transformers tuple, " +
	"which is after the norm); final_norm = output of the last decoder layer after the final norm, " +
	"the input of lm_head"

// Schema metadata keys.
const (
	metaFormat     = "drafter.capture.format_version"
	metaHidden     = "drafter.capture.hidden_size"
	metaDType      = "drafter.capture.dtype"
	metaLayers     = "drafter.capture.layers"
	metaFinalNorm  = "drafter.capture.final_norm"
	metaConvention = "drafter.capture.layer_convention"
	fieldMetaIndex = "hf_hidden_states_index"
)

// ParseDType parses "float16"/"f16"/"fp16" or "float32"/"f32"/"fp32".
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "float16", "f16", "fp16", "half":
		return Float16, nil
	case "float32", "f32", "fp32", "float":
		return Float32, nil
	}
	return "", fmt.Errorf("capture: unknown dtype %q: expected float16 or float32 (bfloat16 is not supported: Arrow has no bfloat16 type)", s)
}

// Size returns the size in bytes of one stored element, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case Float16:
		return 2
	case Float32:
		return 4
	}
	return 0
}

func (d DType) arrow() arrow.DataType {
	if d == Float32 {
		return arrow.PrimitiveTypes.Float32
	}
	return arrow.FixedWidthTypes.Float16
}

// Layout describes which states a capture holds and how they are stored.
type Layout struct {
	// Layers are Hugging Face hidden_states indices, strictly increasing, each >= 0.
	Layers []int
	// FinalNorm adds the final_norm column (the state after the model's final norm).
	FinalNorm bool
	// Hidden is the hidden size H of every state column.
	Hidden int
	// DType is the storage type.
	DType DType
}

// Validate reports a layout that cannot be written.
func (l Layout) Validate() error {
	if l.Hidden <= 0 {
		return fmt.Errorf("capture: hidden size %d: expected a positive integer", l.Hidden)
	}
	if l.DType != Float16 && l.DType != Float32 {
		return fmt.Errorf("capture: dtype %q: expected %q or %q", l.DType, Float16, Float32)
	}
	if len(l.Layers) == 0 && !l.FinalNorm {
		return fmt.Errorf("capture: no states to capture: expected at least one layer index or the final norm")
	}
	for i, k := range l.Layers {
		if k < 0 {
			return fmt.Errorf("capture: layer index %d: expected >= 0 (0 = embedding output)", k)
		}
		if i > 0 && k <= l.Layers[i-1] {
			return fmt.Errorf("capture: layer indices %v: expected strictly increasing values without duplicates", l.Layers)
		}
	}
	return nil
}

// ColumnName returns the column name of hidden_states index k: "hidden_<k>".
func ColumnName(k int) string { return "hidden_" + strconv.Itoa(k) }

// Columns returns the names of the state columns in storage order: hidden_<k> for each layer,
// then final_norm if present. Sample.States follows this order.
func (l Layout) Columns() []string {
	cols := make([]string, 0, len(l.Layers)+1)
	for _, k := range l.Layers {
		cols = append(cols, ColumnName(k))
	}
	if l.FinalNorm {
		cols = append(cols, ColFinalNorm)
	}
	return cols
}

// Schema returns the Arrow schema of a shard with this layout. The layout should have
// passed Validate.
func (l Layout) Schema() *arrow.Schema {
	return Schema(l.Layers, l.FinalNorm, l.Hidden, l.DType)
}

// Schema returns the Arrow schema of a shard holding hidden_states indices layers (and
// final_norm when includeFinal), of hidden size hidden, stored as dtype. It does not
// validate its arguments; see Layout.Validate.
func Schema(layers []int, includeFinal bool, hidden int, dtype DType) *arrow.Schema {
	fields := []arrow.Field{
		{Name: ColSampleID, Type: arrow.PrimitiveTypes.Int64},
		{Name: ColPosition, Type: arrow.PrimitiveTypes.Int32},
		{Name: ColTokenID, Type: arrow.PrimitiveTypes.Int32},
		{Name: ColLossMask, Type: arrow.FixedWidthTypes.Boolean},
	}
	list := arrow.FixedSizeListOfNonNullable(int32(hidden), dtype.arrow())
	for _, k := range layers {
		fields = append(fields, arrow.Field{Name: ColumnName(k), Type: list,
			Metadata: arrow.NewMetadata([]string{fieldMetaIndex}, []string{strconv.Itoa(k)})})
	}
	if includeFinal {
		fields = append(fields, arrow.Field{Name: ColFinalNorm, Type: list,
			Metadata: arrow.NewMetadata([]string{fieldMetaIndex}, []string{ColFinalNorm})})
	}
	ls := make([]string, len(layers))
	for i, k := range layers {
		ls[i] = strconv.Itoa(k)
	}
	md := arrow.NewMetadata(
		[]string{metaFormat, metaHidden, metaDType, metaLayers, metaFinalNorm, metaConvention},
		[]string{strconv.Itoa(FormatVersion), strconv.Itoa(hidden), string(dtype), strings.Join(ls, ","),
			strconv.FormatBool(includeFinal), LayerConvention})
	return arrow.NewSchema(fields, &md)
}

// checkSchema compares a shard's schema with the one the layout expects, field by field,
// and names the first difference.
func checkSchema(got *arrow.Schema, l Layout, file string) error {
	want := l.Schema()
	if got.NumFields() != want.NumFields() {
		return fmt.Errorf("%s: schema has %d columns %v, manifest layout expects %d %v",
			file, got.NumFields(), fieldNames(got), want.NumFields(), fieldNames(want))
	}
	for i := 0; i < want.NumFields(); i++ {
		g, w := got.Field(i), want.Field(i)
		if g.Name != w.Name || !arrow.TypeEqual(g.Type, w.Type) {
			return fmt.Errorf("%s: column %d is %s %s, manifest layout expects %s %s",
				file, i, g.Name, g.Type, w.Name, w.Type)
		}
	}
	return nil
}

func fieldNames(s *arrow.Schema) []string {
	out := make([]string, s.NumFields())
	for i := range out {
		out[i] = s.Field(i).Name
	}
	return out
}
