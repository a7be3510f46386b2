//go:build unix

package monitoring_test

import (
	"context"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

var updatePicture = flag.Bool("update-picture", false,
	"TestPicture: run 80 s of traffic through the chi example and a real Prometheus, and draw "+picturePath+" (and .svg) from what Prometheus recorded")

// picturePath is the README's picture, from this folder.
const picturePath = "../docs/img/monitoring.png"

// The outcomes of ratelimit_decisions_total, admitted and denied. The
// demo's login limit is a brute-force guard: its denials are locked_out.
const (
	admittedOutcomes = "allowed|fallback_allowed|failed_open"
	deniedOutcomes   = "denied|deny_cache|fallback_denied|failed_closed|locked_out"
)

// A phase is one client's traffic in the picture's run.
type phase struct {
	name     string        // shown on the picture when mark is set
	ip       string        // its source address: the example's client key
	method   string        // GET, POST
	path     string        // on the example
	header   []string      // name, value
	every    time.Duration // one request each
	from, to time.Duration // after the run's start
	mark     bool          // draw its start and name
}

// picturePhases is the traffic of the picture's run: two steady clients
// well under their limits all along, a burst that crosses the global limit
// and a password-guessing client that crosses the login limit.
func picturePhases() []phase {
	key := []string{demoAPIKeyHeader, "picture-key"}
	return []phase{
		{name: "steady client", ip: "127.0.0.2", method: http.MethodGet, path: "/", every: time.Second, to: 80 * time.Second},
		{name: "steady client, users", ip: "127.0.0.2", method: http.MethodGet, path: "/users/1", every: 4 * time.Second, to: 80 * time.Second},
		{name: "API client", ip: "127.0.0.3", method: http.MethodGet, path: "/api/data", header: key, every: 700 * time.Millisecond, to: 80 * time.Second},
		{name: "burst on GET /", ip: "127.0.0.4", method: http.MethodGet, path: "/", every: 100 * time.Millisecond, from: 15 * time.Second, to: 40 * time.Second, mark: true},
		{name: "login guessing", ip: "127.0.0.5", method: http.MethodPost, path: "/login", every: 500 * time.Millisecond, from: 48 * time.Second, to: 63 * time.Second, mark: true},
	}
}

// TestPicture draws the README's picture from a real run: the chi example
// under picturePhases' traffic, scraped by Prometheus every second, and
// Prometheus's own answers to /api/v1/query_range for the admitted and
// denied rates and the deny ratio of each limit. It runs only with
// -update-picture:
//
//	go test ./monitoring -run TestPicture -update-picture
func TestPicture(t *testing.T) {
	if !*updatePicture {
		t.Skip("draws docs/img/monitoring.png from an 80 s run; pass -update-picture")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := startStack(t, ctx)

	phases := picturePhases()
	clients := map[string]*http.Client{}
	for _, ph := range phases {
		if clients[ph.ip] == nil {
			clients[ph.ip] = clientFrom(ph.ip)
		}
	}
	// Two scrapes of zeros before the traffic, so that rate() starts at 0.
	time.Sleep(2 * time.Second)
	start := time.Now()
	var end time.Duration
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[string]map[int]int{}
	for _, ph := range phases {
		end = max(end, ph.to)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[ph.ip]
			time.Sleep(time.Until(start.Add(ph.from)))
			tick := time.NewTicker(ph.every)
			defer tick.Stop()
			for time.Since(start) < ph.to && ctx.Err() == nil {
				code := request(ctx, c, ph.method, s.app+ph.path, ph.header)
				mu.Lock()
				if statuses[ph.name] == nil {
					statuses[ph.name] = map[int]int{}
				}
				statuses[ph.name][code]++
				mu.Unlock()
				<-tick.C
			}
		}()
	}
	wg.Wait()
	t.Logf("statuses by client: %v", statuses)
	time.Sleep(3 * time.Second) // the last scrape and evaluation

	from, to := start.Add(-2*time.Second), start.Add(end+2*time.Second)
	sel := fmt.Sprintf(`ratelimit_decisions_total{job=%q,outcome=~"%%s"}`, stackJob)
	rate := func(outcomes string) string {
		return fmt.Sprintf(`sum by (limit) (rate(%s[10s]))`, fmt.Sprintf(sel, outcomes))
	}
	panels := []panel{
		{title: "admitted per second, by limit", expr: rate(admittedOutcomes)},
		{title: "denied per second, by limit", expr: rate(deniedOutcomes)},
		{title: "deny ratio (denied / decided), by limit", expr: rate(deniedOutcomes) + " / " + rate(admittedOutcomes+"|"+deniedOutcomes), ratio: true},
	}
	for i := range panels {
		r, err := s.queryRange(ctx, panels[i].expr, from, to, time.Second)
		require.NoError(t, err, "query_range %s", panels[i].expr)
		require.NotEmpty(t, r, "query_range %s", panels[i].expr)
		panels[i].series = r
		panels[i].start = start
	}
	var marks []mark
	for _, ph := range phases {
		if ph.mark {
			marks = append(marks, mark{at: ph.from.Seconds(), to: ph.to.Seconds(), text: ph.name})
		}
	}
	title := "The chi example under changing traffic, scraped by a real Prometheus every second\n" +
		"sum by (limit) (rate(ratelimit_decisions_total{outcome=...}[10s])), from /api/v1/query_range\n" +
		"steady clients all along: GET / 1/s, GET /api/data 1.4/s, GET /users/1 every 4 s; shaded: one client's burst, 10/s; another guessing passwords, 2/s"
	for _, path := range []string{picturePath, picturePath[:len(picturePath)-len(".png")] + ".svg"} {
		f, err := os.Create(path)
		require.NoError(t, err)
		require.NoError(t, drawPicture(f, filepath.Ext(path)[1:], title, panels, marks), "drawing %s", path)
		require.NoError(t, f.Close())
		t.Logf("wrote %s", path)
	}
}

// request sends one request and returns its status, or 0 when it failed.
func request(ctx context.Context, c *http.Client, method, url string, header []string) int {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}

// A panel is one plot of the picture: the series of one range query.
type panel struct {
	title  string
	expr   string
	ratio  bool      // the y axis runs from 0 to 1
	start  time.Time // x = 0
	series []rangeSeries
}

// A mark is a phase of the traffic, shaded on every panel.
type mark struct {
	at, to float64 // seconds
	text   string
}

// limitColors are the limits' colors, the same on every panel.
var limitColors = map[string]color.Color{
	"global": color.RGBA{R: 31, G: 119, B: 180, A: 255},
	"login":  color.RGBA{R: 214, G: 39, B: 40, A: 255},
	"api":    color.RGBA{R: 44, G: 160, B: 44, A: 255},
	"users":  color.RGBA{R: 148, G: 103, B: 189, A: 255},
}

// drawPicture draws panels one above the other, in format "png" or "svg".
func drawPicture(w io.Writer, format, title string, panels []panel, marks []mark) error {
	rows := make([][]*plot.Plot, len(panels))
	var xmax float64
	for _, pn := range panels {
		for _, s := range pn.series {
			if n := len(s.T); n > 0 {
				xmax = max(xmax, s.T[n-1].Sub(pn.start).Seconds())
			}
		}
	}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		if i == 0 {
			p.Title.Text = title + "\n\n" + pn.title
		}
		p.Title.TextStyle.Font.Size = vg.Points(11)
		if i == len(panels)-1 {
			p.X.Label.Text = "time since the traffic started (s)"
		}
		p.X.Min, p.X.Max = -2, xmax
		p.X.Tick.Marker = everyTicks(10)
		p.Y.Min = 0
		if pn.ratio {
			p.Y.Max = 1
		}
		p.Add(plotter.NewGrid())
		// The series first, for the y range; the marks' shading behind.
		sort.Slice(pn.series, func(a, b int) bool { return pn.series[a].Metric["limit"] < pn.series[b].Metric["limit"] })
		var lines []plot.Plotter
		ymax := 0.0
		for _, s := range pn.series {
			limit := s.Metric["limit"]
			col, ok := limitColors[limit]
			if !ok {
				col = color.Black
			}
			var first *plotter.Line
			for _, seg := range segments(s, pn.start) {
				l, err := plotter.NewLine(seg)
				if err != nil {
					return fmt.Errorf("%s, limit %s: %w", pn.title, limit, err)
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
		if !pn.ratio {
			p.Y.Max = math.Max(1, ymax*1.15)
		}
		for _, m := range marks {
			band, err := plotter.NewPolygon(plotter.XYs{{X: m.at, Y: p.Y.Min}, {X: m.to, Y: p.Y.Min}, {X: m.to, Y: p.Y.Max}, {X: m.at, Y: p.Y.Max}})
			if err != nil {
				return err
			}
			band.Color = color.NRGBA{R: 255, G: 170, B: 0, A: 45}
			band.LineStyle.Width = 0
			band.LineStyle.Color = color.Transparent
			p.Add(band)
			if i == 0 {
				labels, err := plotter.NewLabels(plotter.XYLabels{
					XYs:    []plotter.XY{{X: m.at + 0.5, Y: p.Y.Max * 0.97}},
					Labels: []string{m.text},
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
	var c vg.CanvasWriterTo
	switch format {
	case "svg":
		c = vgsvg.New(width, height)
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110), vgimg.UseBackgroundColor(color.White))}
	default:
		return fmt.Errorf("unknown picture format %q", format)
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(10), PadY: vg.Points(8)}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	_, err := c.WriteTo(w)
	return err
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

// segments splits s into lines of finite points, x in seconds since
// start: a ratio is NaN while its limit decides nothing.
func segments(s rangeSeries, start time.Time) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for i, v := range s.V {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, plotter.XY{X: s.T[i].Sub(start).Seconds(), Y: v})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
