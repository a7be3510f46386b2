package picture

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update-picture", false,
	"TestPicture: draw "+dataPath+"'s picture into monitoring.png and .svg beside it")

// dataPath is what the monitoring package's TestPicture records, from
// this folder.
const dataPath = "../../../../docs/img/monitoring.json"

// sample is a small Picture of every kind of series: a rate, a ratio with
// gaps (not a number while nothing is decided), and a shaded phase.
func sample() *Picture {
	f := func(v float64) *float64 { return &v }
	nan := math.NaN()
	return &Picture{
		Title: "sample",
		Panels: []Panel{
			{Title: "admitted", Series: []Series{
				{Limit: "global", X: []float64{0, 1, 2, 3}, Y: []*float64{f(1), f(2), f(3), f(2)}},
				{Limit: "unknown-limit", X: []float64{0, 1, 2, 3}, Y: []*float64{f(0), f(1), f(0), f(1)}},
			}},
			{Title: "deny ratio", Ratio: true, Series: []Series{
				{Limit: "login", X: []float64{0, 1, 2, 3, 4}, Y: []*float64{nil, f(0.5), f(nan), f(1), f(0.25)}},
			}},
		},
		Marks: []Mark{{At: 1, To: 2, Text: "burst"}},
	}
}

// TestDraw draws a sample in both formats: a PNG and an SVG come out,
// and bad input is an error, not a panic.
func TestDraw(t *testing.T) {
	var png, svg bytes.Buffer
	require.NoError(t, Draw(&png, "png", sample()))
	assert.True(t, bytes.HasPrefix(png.Bytes(), []byte("\x89PNG\r\n\x1a\n")), "a PNG")
	require.NoError(t, Draw(&svg, "svg", sample()))
	assert.Contains(t, svg.String(), "<svg")
	assert.Contains(t, svg.String(), "burst", "the mark's label")

	assert.ErrorContains(t, Draw(&png, "gif", sample()), "unknown plot format")
	assert.ErrorContains(t, Draw(&png, "png", &Picture{}), "no panel")
	bad := sample()
	bad.Panels[0].Series[0].Y = bad.Panels[0].Series[0].Y[:1]
	assert.ErrorContains(t, Draw(&png, "png", bad), "4 x for 1 y")
}

// TestPicture draws the monitoring guide's picture from the recorded data,
// with -update-picture; without it, it checks that the data, when it is
// there, still draws.
func TestPicture(t *testing.T) {
	pic, err := Load(dataPath)
	if os.IsNotExist(err) && !*update {
		t.Skipf("no %s yet: go test ./monitoring -run TestPicture -update-picture records it", dataPath)
	}
	require.NoError(t, err)
	for _, format := range []string{"png", "svg"} {
		var b bytes.Buffer
		require.NoError(t, Draw(&b, format, pic), format)
		if *update {
			path := strings.TrimSuffix(dataPath, ".json") + "." + format
			require.NoError(t, os.WriteFile(filepath.FromSlash(path), b.Bytes(), 0o644))
			t.Logf("wrote %s", path)
		}
	}
}
