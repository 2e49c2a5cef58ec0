package eval

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Plot file names written by WritePlots.
const (
	PlotAcceptLength = "accept_length.png"
	PlotAcceptDepth  = "accept_by_depth.png"
)

// WritePlots draws two PNG charts into dir (created if needed): the
// distribution of tokens committed per verification step, and the acceptance
// rate by draft depth. Files are written atomically.
func (rep *Report) WritePlots(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("eval: plots: %w", err)
	}
	title := fmt.Sprintf("%s, %s (τ = %.2f)", rep.Drafter.Kind, rep.shape(), rep.MeanAcceptLength)

	n := max(len(rep.AcceptLengthHist)-1, 0)
	shares := make(plotter.Values, n)
	labels := make([]string, n)
	for i := range n {
		shares[i] = pct(rep.AcceptLengthHist[i+1], rep.Stats.Steps)
		labels[i] = strconv.Itoa(i + 1)
	}
	if err := barChart(filepath.Join(dir, PlotAcceptLength), title, "tokens committed per target forward", "share of steps (%)", shares, labels); err != nil {
		return err
	}

	rates := make(plotter.Values, len(rep.AcceptRateByDepth))
	labels = make([]string, len(rates))
	for i, r := range rep.AcceptRateByDepth {
		rates[i] = r
		labels[i] = strconv.Itoa(i + 1)
	}
	return barChart(filepath.Join(dir, PlotAcceptDepth), title, "draft depth", "acceptance rate (given the depth was reached)", rates, labels)
}

// barChart renders one bar chart to a PNG file.
func barChart(path, title, xLabel, yLabel string, vals plotter.Values, labels []string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	if len(vals) > 0 {
		bars, err := plotter.NewBarChart(vals, vg.Points(18))
		if err != nil {
			return fmt.Errorf("eval: plot %s: %w", path, err)
		}
		bars.LineStyle.Width = vg.Length(0)
		p.Add(bars)
		p.NominalX(labels...)
	}
	w, err := p.WriterTo(6*vg.Inch, 4*vg.Inch, "png")
	if err != nil {
		return fmt.Errorf("eval: plot %s: %w", path, err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return fmt.Errorf("eval: plot %s: %w", path, err)
	}
	return writeFileAtomic(path, buf.Bytes())
}
