package sim

import (
	"fmt"
	"image/color"
	"io"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var (
	limitColor = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	deathColor = color.RGBA{R: 255, G: 127, B: 14, A: 255}
)

// PlotLeases writes the figures of reports (one row per report) into dir:
// leases-admitted.svg, admitted per second against the limit, and
// leases-store-ops.svg, store operations per second with leases and
// without.
func PlotLeases(reports []LeaseReport, dir string) error {
	if len(reports) == 0 {
		return fmt.Errorf("nothing to plot")
	}
	for name, row := range map[string]func(LeaseReport, bool) (*plot.Plot, error){
		"leases-admitted.svg":  admittedPlot,
		"leases-store-ops.svg": opsPlot,
	} {
		rows := make([][]*plot.Plot, len(reports))
		for i, r := range reports {
			p, err := row(r, i == 0)
			if err != nil {
				return err
			}
			if i == len(reports)-1 {
				p.X.Label.Text = "virtual time (s)"
			}
			rows[i] = []*plot.Plot{p}
		}
		if err := writeFile(filepath.Join(dir, name), func(w io.Writer) error { return drawRows(w, rows) }); err != nil {
			return err
		}
	}
	return nil
}

// drawRows draws rows, one plot each, stacked, as SVG.
func drawRows(w io.Writer, rows [][]*plot.Plot) error {
	width, height := 8*vg.Inch, vg.Length(len(rows))*2*vg.Inch+0.4*vg.Inch
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(8)}
	return WriteStacked(w, rows, width, height, tiles, "svg")
}

// admittedPlot is r's admitted per second, with and without the death,
// against the limit's rate and the demand.
func admittedPlot(r LeaseReport, legend bool) (*plot.Plot, error) {
	p := plot.New()
	pol := r.Policy
	p.Title.Text = fmt.Sprintf("%s, %d per %v, lease %v: worst excess %d (bound %d), %.2f%% of the limit used",
		pol.Algorithm, pol.Limit, pol.Window, pol.Lease, r.WorstExcess, r.Bound, 100*r.Utilization)
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.Y.Label.Text = "admitted per second"
	rate := float64(pol.Limit) / pol.Window.Seconds()
	end := float64(len(r.Admitted))
	calm, err := stepLine(r.Admitted, admittedColor, 1.5)
	if err != nil {
		return nil, err
	}
	death, err := stepLine(r.AdmittedDeath, deathColor, 1)
	if err != nil {
		return nil, err
	}
	limit, err := flatLine(rate, end, limitColor)
	if err != nil {
		return nil, err
	}
	demand, err := flatLine(r.Options.Demand*rate, end, offeredColor)
	if err != nil {
		return nil, err
	}
	p.Add(plotter.NewGrid(), demand, limit, death, calm)
	if legend {
		p.Legend.Add("demand", demand)
		p.Legend.Add("limit's rate", limit)
		p.Legend.Add("admitted", calm)
		p.Legend.Add(fmt.Sprintf("admitted, %.0f%% of the servers dead at %v", 100*r.Options.Die, r.Options.DieAt), death)
		p.Legend.Top = true
	}
	p.Y.Min, p.Y.Max = 0, 2*r.Options.Demand*rate
	return p, nil
}

// opsPlot is r's store operations per second, with leases and without.
func opsPlot(r LeaseReport, legend bool) (*plot.Plot, error) {
	p := plot.New()
	pol := r.Policy
	p.Title.Text = fmt.Sprintf("%s, lease %v: %.0f store operations/s leased, %.0f without (%.0f times fewer)",
		pol.Algorithm, pol.Lease, r.LeasedOps(), r.PlainOps, r.PlainOps/r.LeasedOps())
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.Y.Label.Text = "store ops/s"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	ops := make([]int64, len(r.Ops))
	for i, n := range r.Ops {
		ops[i] = max(n, 1) // a log scale
	}
	leased, err := stepLine(ops, admittedColor, 1.5)
	if err != nil {
		return nil, err
	}
	plain, err := flatLine(r.PlainOps, float64(len(ops)), limitColor)
	if err != nil {
		return nil, err
	}
	p.Add(plotter.NewGrid(), plain, leased)
	if legend {
		p.Legend.Add("without leases: one a request", plain)
		p.Legend.Add("with leases: Take and Refund", leased)
		p.Legend.Top = true
	}
	p.Y.Min, p.Y.Max = 10, 4*r.PlainOps
	return p, nil
}

// stepLine draws ys, one a second, as steps.
func stepLine(ys []int64, c color.Color, width float64) (*plotter.Line, error) {
	xys := make(plotter.XYs, 0, 2*len(ys))
	for i, y := range ys {
		xys = append(xys, plotter.XY{X: float64(i), Y: float64(y)}, plotter.XY{X: float64(i + 1), Y: float64(y)})
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	l.Color, l.Width = c, vg.Points(width)
	return l, nil
}

// flatLine draws y from 0 to end, dashed.
func flatLine(y, end float64, c color.Color) (*plotter.Line, error) {
	l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: y}, {X: end, Y: y}})
	if err != nil {
		return nil, err
	}
	l.Color = c
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	return l, nil
}
