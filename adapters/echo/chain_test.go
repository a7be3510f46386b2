package echolimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
)

// TestChainCache: the same next gets the same handler; another next gets
// its own, which calls it; after maxChainMisses misses nothing more is
// cached, and every handler still calls its own next.
func TestChainCache(t *testing.T) {
	var cc chainCache
	calls := map[int]int{}
	next := func(i int) echo.HandlerFunc {
		return func(echo.Context) error { calls[i]++; return nil }
	}
	build := func(n echo.HandlerFunc) echo.HandlerFunc {
		if h, ok := cc.get(n); ok {
			return h
		}
		h := func(c echo.Context) error { return n(c) }
		cc.put(n, h)
		return h
	}
	a, b := next(1), next(2)
	ha := build(a)
	assert.Equal(t, funcPointer(ha), funcPointer(build(a)), "the same next, the same handler")
	hb := build(b)
	assert.NotEqual(t, funcPointer(ha), funcPointer(hb))
	require.NoError(t, ha(nil))
	require.NoError(t, hb(nil))
	assert.Equal(t, map[int]int{1: 1, 2: 1}, calls)

	for i := range maxChainMisses + 10 {
		n := next(100 + i)
		require.NoError(t, build(n)(nil))
		require.NoError(t, build(n)(nil))
		assert.Equal(t, 2, calls[100+i])
	}
	assert.Equal(t, int64(maxChainMisses), cc.misses.Load())
	_, ok := cc.get(nil)
	assert.False(t, ok)
}

// TestChainCacheAllocs: mounted with e.Use, the middleware builds its
// handler once for a route, not once a request.
func TestChainCacheAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts do not hold under the race detector")
	}
	st, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	f, err := httplimit.New(st, []httplimit.Layer{{Policy: core.Policy{Name: "p", Algorithm: core.TokenBucket, Limit: 1e12, Window: 60e9}}})
	require.NoError(t, err)
	serve := func(mw echo.MiddlewareFunc) func() {
		e := echo.New()
		e.Use(mw)
		e.GET("/users/:id", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
		r := httptest.NewRequest(http.MethodGet, "/users/42", nil)
		r.RemoteAddr = "203.0.113.7:1"
		w := httptest.NewRecorder()
		return func() {
			clear(w.Header())
			e.ServeHTTP(w, r)
		}
	}
	bare := serve(func(next echo.HandlerFunc) echo.HandlerFunc { return next })
	ours := serve(New(f))
	bare()
	ours()
	assert.Equal(t, testing.AllocsPerRun(100, bare)+1, testing.AllocsPerRun(100, ours),
		"one allocation over bare Echo: the header block, and no handler")
}
