package headers

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// mapHeader is a HeaderMap over an http.Header, as the adapters' responses.
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
	v := &core.Verdict{Decision: ds[1], Binding: 1, Decisions: ds}
	h := http.Header{}
	WriteLayers(h, v, now, all)
	assert.Equal(t, "0", h.Get(XRateLimitRemaining), "the binding layer")
	assert.Equal(t, "5", h.Get(RateLimitLimit))
	assert.Equal(t, "600", h.Get(RetryAfter))
	assert.Equal(t, `"login";r=0;t=600, "global";r=990;t=30, "ip";r=12;t=45`, h.Get(RateLimit), "binding first, then in order")
	assert.Equal(t, `"login";q=5;w=60, "global";q=1000;w=60, "ip";q=300;w=60`, h.Get(RateLimitPolicy))
	items, err := ParseLayers(h)
	require.NoError(t, err)
	assert.Equal(t, []LayerInfo{
		{Name: "login", Remaining: 0, ResetAfter: 600 * time.Second, Quota: 5, Window: time.Minute},
		{Name: "global", Remaining: 990, ResetAfter: 30 * time.Second, Quota: 1000, Window: time.Minute},
		{Name: "ip", Remaining: 12, ResetAfter: 45 * time.Second, Quota: 300, Window: time.Minute},
	}, items)
	info, err := Parse(h)
	require.NoError(t, err)
	assert.Equal(t, "login", info.Policy, "Parse reads the binding layer")
	assert.Equal(t, int64(0), info.Remaining)

	// One layer: exactly Write's fields.
	one := &core.Verdict{Decision: ds[0], Binding: 0, Decisions: ds[:1]}
	a, b := http.Header{}, http.Header{}
	WriteLayers(a, one, now, all)
	Write(b, ds[0], now, all)
	assert.Equal(t, b, a)
	// No layer, or failed open: nothing.
	c := http.Header{}
	WriteLayers(c, &core.Verdict{Binding: -1}, now, all)
	open := &core.Verdict{Decision: core.Decision{Allowed: true, Source: core.SourceFailMode}, Binding: 0, Decisions: ds}
	WriteLayers(c, open, now, all)
	WriteLayers(c, nil, now, all)
	assert.Empty(t, c)
}

func TestWriteLayersAllocs(t *testing.T) {
	all := Config{XRateLimit: true, Draft6: true, Structured: true, RetryAfter: true}
	ds := []core.Decision{
		layerDecision("global", true, 1000, 990, 30*time.Second, 0),
		layerDecision("user", true, 100, 7, 20*time.Second, 0),
		layerDecision("ip", true, 300, 12, 45*time.Second, 0),
	}
	v := &core.Verdict{Decision: ds[1], Binding: 1, Decisions: ds}
	m := mapHeader{http.Header{}}
	now := time.Unix(1_900_000_000, 0)
	layered := testing.AllocsPerRun(100, func() { WriteLayers(m, v, now, all) })
	single := testing.AllocsPerRun(100, func() { Write(m, ds[1], now, all) })
	assert.Equal(t, single, layered, "as many allocations for every layer as for one")
	assert.LessOrEqual(t, layered, 2.0)
}

func TestParseLayersMalformed(t *testing.T) {
	for _, v := range []string{`"a";r=x`, `"a"`, `1;r=2`, `"a";r=1,`} {
		_, err := ParseLayers(http.Header{RateLimit: {v}})
		assert.ErrorIs(t, err, ErrMalformed, v)
	}
	items, err := ParseLayers(http.Header{})
	assert.NoError(t, err)
	assert.Empty(t, items)
}
