package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Header is the table's first line: the shape, its layers (and the
// shape's own when --layers overrides them), the parameters, the dtype and
// the device.
func (t *Table) Header() string {
	layers := fmt.Sprintf("%d layers", t.Layers)
	if t.Layers != t.ShapeLayers {
		layers = fmt.Sprintf("%d of the shape's %d layers (--layers)", t.Layers, t.ShapeLayers)
	}
	return fmt.Sprintf("drafter bench --random %s: %s, %.3fB parameters, %s, on %s", t.Shape, layers, float64(t.Params)/1e9, t.DType, t.Device)
}

// WriteText writes the header and one aligned line per row.
func (t *Table) WriteText(w io.Writer) error {
	var b strings.Builder
	b.WriteString(t.Header() + "\n\n")
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tvalue\tunit\thow")
	for _, r := range t.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, formatValue(r.Value), r.Unit, r.Detail)
	}
	tw.Flush()
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the table as one indented JSON object.
func (t *Table) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(t)
}

// formatValue keeps three significant digits, more for large rates.
func formatValue(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
