package sim_test

import (
	"context"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/sim"
)

// TestReadmePlotsAreCurrent regenerates the README's figures and compares
// the SVG byte for byte with the committed one: it is text written by pure
// Go (fonts embedded in gonum, coordinates rounded), so it is the same on
// every machine for the same simulation. The PNG is rasterized and may
// differ in anti-aliasing, so it is only checked to be a PNG of the same
// size. On failure: go generate ./cmd/ratelimit
func TestReadmePlotsAreCurrent(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, sim.ReadmePlots(context.Background(), dir))
	committed := filepath.Join("..", "..", "..", "..", "docs", "img")
	want, err := os.ReadFile(filepath.Join(committed, "algorithms.svg"))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(dir, "algorithms.svg"))
	require.NoError(t, err)
	require.True(t, string(want) == string(got), "docs/img/algorithms.svg is stale: run go generate ./cmd/ratelimit")

	cfgOf := func(path string) (w, h int) {
		f, err := os.Open(path)
		require.NoError(t, err)
		defer f.Close()
		c, err := png.DecodeConfig(f)
		require.NoError(t, err)
		return c.Width, c.Height
	}
	ww, wh := cfgOf(filepath.Join(committed, "algorithms.png"))
	gw, gh := cfgOf(filepath.Join(dir, "algorithms.png"))
	assert.Equal(t, [2]int{gw, gh}, [2]int{ww, wh})
}
