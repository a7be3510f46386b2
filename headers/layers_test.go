package headers

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// mapHeader is a fastMap over an http.Header, as the adapters' responses.
type mapHeader struct{ h http.Header }

func (m mapHeader) Set(k, v string)        { m.h.Set(k, v) }
func (m mapHeader) HeaderMap() http.Header { return m.h }

func layerDecision(name string, allowed bool, limit, remaining int64, reset, retry time.Duration) core.Decision {
	return core.Decision{
		Allowed: allowed, Limit: limit, Remaining: remaining, ResetAfter: reset, RetryAfter: retry,
		Policy: core.Policy{Name: name, Algorithm: core.FixedWindow, Limit: limit, Window: time.Minute},
	}
}

func TestWriteLayers(t *testing.T) {
	all := Config{XRateLimit: true, Draft6: true, Structured: true, RetryAfter: true}
	now := time.Unix(1_900_000_000, 0)
	ds := []core.Decision{
		layerDecision("global", true, 1000, 990, 30*time.Second, 0),
		layerDecision("login", false, 5, 0, 600*time.Second, 600*time.Second),
		layerDecision("ip", true, 300, 12, 45*time.Second, 0),
	}
	w := NewWriter(all)
	h := http.Header{}
	w.Write(h, ds[1], ds, now)
	assert.Equal(t, "0", h.Get(canonXRateLimitRemaining), "the binding layer")
	assert.Equal(t, "5", h.Get(canonRateLimitLimit))
	assert.Equal(t, "600", h.Get(canonRetryAfter))
	assert.Equal(t, `"login";r=0;t=600, "global";r=990;t=30, "ip";r=12;t=45`, h.Get(canonRateLimit), "binding first, then in order")
	assert.Equal(t, `"login";q=5;w=60, "global";q=1000;w=60, "ip";q=300;w=60`, h.Get(canonRateLimitPolicy))
	items, err := parseLayers(h)
	require.NoError(t, err)
	info, err := parseFirst(h)
	require.NoError(t, err)
	assert.Equal(t, "login", info.Policy, "Parse reads the binding layer")
	assert.Equal(t, int64(0), info.Remaining)
	assert.Equal(t, []fields{
		info,
		{Found: Config{Structured: true}, Policy: "global", Remaining: 990, ResetAfter: 30 * time.Second, Quota: 1000, Window: time.Minute},
		{Found: Config{Structured: true}, Policy: "ip", Remaining: 12, ResetAfter: 45 * time.Second, Quota: 300, Window: time.Minute},
	}, items, "the binding layer's fields is Parse's")
	assert.Equal(t, fields{Found: all, Policy: "login", Limit: 5, Remaining: 0, ResetAfter: 600 * time.Second,
		RetryAfter: 600 * time.Second, Quota: 5, Window: time.Minute}, items[0])

	// The binding decision is found by name, wherever it is, and may
	// differ from its layer's in what the verdict adds (a longer
	// RetryAfter: when every layer admits).
	binding := ds[1]
	binding.RetryAfter = 700 * time.Second
	reordered := []core.Decision{ds[2], ds[1], ds[0]}
	h = http.Header{}
	w.Write(h, binding, reordered, now)
	assert.Equal(t, "700", h.Get(canonRetryAfter), "the binding decision's RetryAfter")
	assert.Equal(t, `"login";r=0;t=600, "ip";r=12;t=45, "global";r=990;t=30`, h.Get(canonRateLimit))

	// A binding decision of no layer's name comes first, then every layer.
	other := layerDecision("other", true, 9, 8, time.Second, 0)
	h = http.Header{}
	w.Write(h, other, ds, now)
	assert.Equal(t, `"other";r=8;t=1, "global";r=990;t=30, "login";r=0;t=600, "ip";r=12;t=45`, h.Get(canonRateLimit))
	assert.Equal(t, "8", h.Get(canonXRateLimitRemaining))

	// One layer, or layers without the structured family: exactly the
	// single decision's fields.
	for _, cfg := range []Config{all, defaultConfig, {Draft6: true}} {
		w := NewWriter(cfg)
		a, b := http.Header{}, http.Header{}
		w.Write(a, ds[0], ds[:1], now)
		w.Write(b, ds[0], nil, now)
		assert.Equal(t, b, a, "%+v: one layer", cfg)
		if !cfg.Structured {
			c := http.Header{}
			w.Write(c, ds[1], ds, now)
			d := http.Header{}
			w.Write(d, ds[1], nil, now)
			assert.Equal(t, d, c, "%+v: no list to write", cfg)
		}
	}
	// Failed open: nothing.
	c := http.Header{}
	w.Write(c, core.Decision{Allowed: true, Source: core.SourceFailMode}, ds, now)
	assert.Empty(t, c)
}

// TestWriteLayersFastPaths: a layered write reaches a bytes setter and a
// header map as a single one does, with the same fields as a plain
// Setter gets.
func TestWriteLayersFastPaths(t *testing.T) {
	all := Config{XRateLimit: true, Draft6: true, Structured: true, RetryAfter: true}
	ds := []core.Decision{
		layerDecision("global", true, 1000, 990, 30*time.Second, 0),
		layerDecision("user", true, 100, 7, 20*time.Second, 0),
	}
	now := time.Unix(1_900_000_000, 0)
	w := NewWriter(all)
	want := &recordingSetter{}
	w.Write(want, ds[1], ds, now)
	require.Len(t, want.m, 8)
	b := &bytesSetter{}
	w.Write(b, ds[1], ds, now)
	assert.Equal(t, want.m, b.m)
	m := mapHeader{http.Header{}}
	w.Write(m, ds[1], ds, now)
	for k, v := range want.m {
		assert.Equal(t, []string{v}, m.h[k], k)
	}
	cs := &countingBytesSetter{}
	assert.Zero(t, testing.AllocsPerRun(100, func() { w.Write(cs, ds[1], ds, now) }), "bytes setter")
}

func TestWriteLayersAllocs(t *testing.T) {
	all := Config{XRateLimit: true, Draft6: true, Structured: true, RetryAfter: true}
	ds := []core.Decision{
		layerDecision("global", true, 1000, 990, 30*time.Second, 0),
		layerDecision("user", true, 100, 7, 20*time.Second, 0),
		layerDecision("ip", true, 300, 12, 45*time.Second, 0),
	}
	w := NewWriter(all)
	m := mapHeader{http.Header{}}
	now := time.Unix(1_900_000_000, 0)
	layered := testing.AllocsPerRun(100, func() { w.Write(m, ds[1], ds, now) })
	single := testing.AllocsPerRun(100, func() { w.Write(m, ds[1], nil, now) })
	assert.Equal(t, single, layered, "as many allocations for every layer as for one")
	assert.LessOrEqual(t, layered, 2.0)
}

func TestParseMalformedLayers(t *testing.T) {
	for _, v := range []string{`"a";r=x`, `"a"`, `1;r=2`, `"a";r=1,`} {
		_, err := parseLayers(http.Header{canonRateLimit: {v}})
		assert.ErrorIs(t, err, ErrMalformed, v)
	}
	_, err := parseLayers(http.Header{canonRateLimit: {`"a";r=1`}, canonXRateLimitRemaining: {"-1"}})
	assert.ErrorIs(t, err, ErrMalformed, "every field is read, as Parse reads it")
	_, err = parseLayers(http.Header{canonRateLimit: {`"a";r=1, "b";r=2`}, canonRateLimitPolicy: {`"b";q=x`}})
	assert.ErrorIs(t, err, ErrMalformed)
	items, err := parseLayers(http.Header{})
	assert.NoError(t, err)
	assert.Empty(t, items)
	items, err = parseLayers(http.Header{canonXRateLimitRemaining: {"3"}})
	assert.NoError(t, err)
	assert.Equal(t, []fields{{Found: Config{XRateLimit: true}, Remaining: 3}}, items, "no RateLimit: the one layer the other families tell of")
}

// TestParseJoin: each item takes the q and w of the first
// RateLimit-Policy item of its name, as Parse does for the first.
func TestParseJoin(t *testing.T) {
	h := http.Header{
		canonRateLimit:       {`"a";r=1;t=2, b;r=3`, `"c";r=4`},
		canonRateLimitPolicy: {`"b";q=0;w=5, "b";q=7;w=8, 9;w=1, "a";q=10;w=60`},
	}
	items, err := parseLayers(h)
	require.NoError(t, err)
	info, err := parseFirst(h)
	require.NoError(t, err)
	assert.Equal(t, []fields{
		info,
		{Found: Config{Structured: true}, Policy: "b", Remaining: 3, Window: 5 * time.Second},
		{Found: Config{Structured: true}, Policy: "c", Remaining: 4},
	}, items)
	assert.Equal(t, fields{Found: Config{Structured: true, Draft6: true}, Policy: "a", Remaining: 1, ResetAfter: 2 * time.Second,
		Quota: 10, Window: time.Minute}, info)

	// Parse gives the same as Decisions: Policy's Name, Limit (q) and Window.
	ds, err := Parse(h)
	require.NoError(t, err)
	assert.Equal(t, []core.Decision{
		{Remaining: 1, ResetAfter: 2 * time.Second, Policy: core.Policy{Name: "a", Limit: 10, Window: time.Minute}},
		{Remaining: 3, Policy: core.Policy{Name: "b", Window: 5 * time.Second}},
		{Remaining: 4, Policy: core.Policy{Name: "c"}},
	}, ds)
}
