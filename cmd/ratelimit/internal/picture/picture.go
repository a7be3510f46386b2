// Package picture draws the monitoring guide's picture
// (docs/img/monitoring.png and .svg) from the data that the monitoring
// package's TestPicture records from a real Prometheus
// (docs/img/monitoring.json). It lives in the command's module, with the
// plotting library, so that the library's module does not require it.
package picture

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/sim"
	"github.com/apigate/ratelimit/internal/rules/picturedata"
)

// The data's shape, shared with monitoring's picture test.
type (
	Picture = picturedata.Picture
	Panel   = picturedata.Panel
	Series  = picturedata.Series
	Mark    = picturedata.Mark
)

// Load reads a Picture from the JSON file at path.
func Load(path string) (*Picture, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p Picture
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("picture: %s: %w", path, err)
	}
	return &p, nil
}

// limitColors are the limits' colors, the same on every panel.
var limitColors = map[string]color.Color{
	"global": color.RGBA{R: 31, G: 119, B: 180, A: 255},
	"login":  color.RGBA{R: 214, G: 39, B: 40, A: 255},
	"api":    color.RGBA{R: 44, G: 160, B: 44, A: 255},
	"users":  color.RGBA{R: 148, G: 103, B: 189, A: 255},
}

// Draw draws pic's panels one above the other, in format "png" or "svg".
func Draw(w io.Writer, format string, pic *Picture) error {
	title, panels, marks := pic.Title, pic.Panels, pic.Marks
	rows := make([][]*plot.Plot, len(panels))
	if len(panels) == 0 {
		return fmt.Errorf("picture: no panel")
	}
	var xmax float64
	for _, pn := range panels {
		for _, s := range pn.Series {
			if len(s.Y) != len(s.X) {
				return fmt.Errorf("picture: %s, limit %s: %d x for %d y", pn.Title, s.Limit, len(s.X), len(s.Y))
			}
			if n := len(s.X); n > 0 {
				xmax = max(xmax, s.X[n-1])
			}
		}
	}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.Title
		if i == 0 {
			p.Title.Text = title + "\n\n" + pn.Title
		}
		p.Title.TextStyle.Font.Size = vg.Points(11)
		if i == len(panels)-1 {
			p.X.Label.Text = "time since the traffic started (s)"
		}
		p.X.Min, p.X.Max = -2, xmax
		p.X.Tick.Marker = everyTicks(10)
		p.Y.Min = 0
		if pn.Ratio {
			p.Y.Max = 1
		}
		p.Add(plotter.NewGrid())
		// The series first, for the y range; the marks' shading behind.
		series := slices.Clone(pn.Series)
		sort.Slice(series, func(a, b int) bool { return series[a].Limit < series[b].Limit })
		var lines []plot.Plotter
		ymax := 0.0
		for _, s := range series {
			limit := s.Limit
			col, ok := limitColors[limit]
			if !ok {
				col = color.Black
			}
			var first *plotter.Line
			for _, seg := range segments(s) {
				l, err := plotter.NewLine(seg)
				if err != nil {
					return fmt.Errorf("%s, limit %s: %w", pn.Title, limit, err)
				}
				l.Color, l.Width = col, vg.Points(1.6)
				lines = append(lines, l)
				for _, xy := range seg {
					ymax = max(ymax, xy.Y)
				}
				if first == nil {
					first = l
				}
			}
			if first != nil && i == 0 {
				p.Legend.Add(limit, first)
			}
		}
		if !pn.Ratio {
			p.Y.Max = math.Max(1, ymax*1.15)
		}
		for _, m := range marks {
			band, err := plotter.NewPolygon(plotter.XYs{{X: m.At, Y: p.Y.Min}, {X: m.To, Y: p.Y.Min}, {X: m.To, Y: p.Y.Max}, {X: m.At, Y: p.Y.Max}})
			if err != nil {
				return err
			}
			band.Color = color.NRGBA{R: 255, G: 170, B: 0, A: 45}
			band.LineStyle.Width = 0
			band.LineStyle.Color = color.Transparent
			p.Add(band)
			if i == 0 {
				labels, err := plotter.NewLabels(plotter.XYLabels{
					XYs:    []plotter.XY{{X: m.At + 0.5, Y: p.Y.Max * 0.97}},
					Labels: []string{m.Text},
				})
				if err != nil {
					return err
				}
				labels.TextStyle[0].Font.Size = vg.Points(9)
				labels.TextStyle[0].YAlign = draw.YTop
				p.Add(labels)
			}
		}
		p.Add(lines...)
		p.Legend.Top, p.Legend.Left = true, false
		p.Legend.TextStyle.Font.Size = vg.Points(10)
		rows[i] = []*plot.Plot{p}
	}
	width, height := 9*vg.Inch, vg.Length(len(panels))*2.3*vg.Inch+0.5*vg.Inch
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(10), PadY: vg.Points(8)}
	return sim.WriteStacked(w, rows, width, height, tiles, format)
}

// everyTicks marks the axis every step, labeled.
type everyTicks float64

func (e everyTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for x := math.Ceil(min/float64(e)) * float64(e); x <= max; x += float64(e) {
		label := fmt.Sprint(x)
		if x == 0 {
			label = "0" // not "-0"
		}
		ticks = append(ticks, plot.Tick{Value: x, Label: label})
	}
	return ticks
}

// segments splits s into lines of finite points: a ratio is not a number
// (null) while its limit decides nothing.
func segments(s Series) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for i, y := range s.Y {
		if y == nil || math.IsNaN(*y) || math.IsInf(*y, 0) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, plotter.XY{X: s.X[i], Y: *y})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
