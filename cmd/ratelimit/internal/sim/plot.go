package sim

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/apigate/ratelimit/internal/rules/limits"
)

var (
	offeredColor  = color.RGBA{R: 160, G: 160, B: 160, A: 255}
	admittedColor = color.RGBA{R: 31, G: 119, B: 180, A: 255}
)

// Plot draws, for each result (one row per policy), the request units
// offered and admitted so far over time (cumulative: a slope is a rate, a
// step is a burst), as SVG or PNG by path's extension. The results need a
// Series (Options.Bucket).
func Plot(results []Result, title, path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".svg" && ext != ".png" {
		return fmt.Errorf("plot %s: want a .svg or .png file", path)
	}
	return writeFile(path, func(w io.Writer) error { return WritePlot(w, ext[1:], results, title) })
}

// writeFile creates path and writes it with write; an error names the
// file.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}

// WritePlot is Plot to a writer, in format "svg" or "png".
func WritePlot(w io.Writer, format string, results []Result, title string) error {
	if len(results) == 0 {
		return fmt.Errorf("nothing to plot")
	}
	rows := make([][]*plot.Plot, len(results))
	var xmax float64
	for _, r := range results {
		if n := len(r.Series); n > 0 {
			xmax = max(xmax, (r.Series[n-1].At + bucketOf(r)).Seconds())
		}
	}
	for i, r := range results {
		if len(r.Series) == 0 {
			return fmt.Errorf("policy %q has no series", r.Policy.Name)
		}
		p, err := policyPlot(r, i == 0, i == len(results)-1)
		if err != nil {
			return err
		}
		if i == 0 && title != "" {
			p.Title.Text = title + "\n" + p.Title.Text
		}
		p.X.Min, p.X.Max = 0, xmax
		rows[i] = []*plot.Plot{p}
	}
	width, height := 8*vg.Inch, vg.Length(len(results))*1.8*vg.Inch+0.4*vg.Inch
	tiles := draw.Tiles{Rows: len(results), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(6)}
	return WriteStacked(w, rows, width, height, tiles, format)
}

// WriteStacked draws rows (one plot each, aligned in tiles) on a canvas of
// width by height, in format ("svg", or "png" at 110 dpi on white), to w:
// the drawing that simulate's plots and the monitoring picture share.
func WriteStacked(w io.Writer, rows [][]*plot.Plot, width, height vg.Length, tiles draw.Tiles, format string) error {
	var c vg.CanvasWriterTo
	switch format {
	case "svg":
		c = vgsvg.New(width, height)
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110), vgimg.UseBackgroundColor(color.White))}
	default:
		return fmt.Errorf("unknown plot format %q", format)
	}
	canvases := plot.Align(rows, tiles, draw.New(c))
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	_, err := c.WriteTo(w)
	return err
}

func policyPlot(r Result, legend, xLabel bool) (*plot.Plot, error) {
	p := plot.New()
	pol := r.Policy
	p.Title.Text = fmt.Sprintf("%s: limit %d per %s, burst %d — admitted %d of %d, worst %d in any %s",
		pol.Algorithm, pol.Limit, pol.Window, limits.Capacity(pol.Algorithm, pol.Limit, pol.Burst), r.Admitted, r.Offered, r.Worst, r.WorstWindow)
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.Y.Label.Text = "requests so far"
	if xLabel {
		p.X.Label.Text = "time (s)"
	}
	bucket := bucketOf(r)
	offered := plotter.XYs{{X: r.Series[0].At.Seconds()}}
	admitted := plotter.XYs{{X: r.Series[0].At.Seconds()}}
	var o, a float64
	for _, pt := range r.Series {
		x := (pt.At + bucket).Seconds()
		o += float64(pt.Offered)
		a += float64(pt.Admitted)
		offered = append(offered, plotter.XY{X: x, Y: o})
		admitted = append(admitted, plotter.XY{X: x, Y: a})
	}
	lo, err := plotter.NewLine(offered)
	if err != nil {
		return nil, err
	}
	lo.Color = offeredColor
	la, err := plotter.NewLine(admitted)
	if err != nil {
		return nil, err
	}
	la.Color = admittedColor
	la.Width = vg.Points(1.5)
	// The limit's rate, from the first request: what a perfectly even
	// limiter would have admitted by then at most (plus the burst).
	rate := float64(pol.Limit) / pol.Window.Seconds()
	x0, x1 := offered[0].X, offered[len(offered)-1].X
	ll, err := plotter.NewLine(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: rate * (x1 - x0)}})
	if err != nil {
		return nil, err
	}
	ll.Color = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	ll.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(plotter.NewGrid(), lo, la, ll)
	if legend {
		p.Legend.Add("offered", lo)
		p.Legend.Add("admitted", la)
		p.Legend.Add("limit rate x time", ll)
		p.Legend.Top = true
	}
	p.Y.Min = 0
	return p, nil
}

// bucketOf is the time step of r's series.
func bucketOf(r Result) time.Duration {
	if len(r.Series) > 1 {
		return r.Series[1].At - r.Series[0].At
	}
	return time.Second
}
