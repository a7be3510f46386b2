package adapterstest

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// RunShadow checks shadow mode over real sockets: a limit of 1 in shadow
// mode lets every request through with no rate-limit header, while its
// observer counts the would-be denials; with headers asked for, they are
// written from the decision as made, without Retry-After.
func RunShadow(t *testing.T, h SocketHarness) {
	for _, withHeaders := range []bool{false, true} {
		name := "default"
		if withHeaders {
			name = "headers asked"
		}
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			outcomes := map[outcome.Outcome]int{}
			obs := limitertest.Observer(func(e core.Event) {
				mu.Lock()
				outcomes[outcome.Of(&e.Decision)]++
				mu.Unlock()
			})
			var opts []httplimit.Option
			if withHeaders {
				opts = append(opts, httplimit.WithHeaders(headers.Config{XRateLimit: true, Draft6: true, RetryAfter: true}))
			}
			m := NewMount(t, clockstore.At(NewStore(t), T0), httplimit.Layer{Policy: fixed("trial", 1)}, []core.Option{core.WithShadow(), core.WithObserver(obs)}, opts...)
			spec := &Spec{Global: []Mount{m}, Routes: []Route{{Method: "GET", Path: "/"}}}
			addr := h.Serve(t, spec)
			const n = 5
			for i := range n {
				res := Send(t, addr, RawRequest{})
				require.Equal(t, 200, res.Status, "request %d", i)
				assert.Equal(t, Body, res.Body)
				assert.Empty(t, res.Header.Values("Retry-After"), "request %d", i)
				if withHeaders {
					assert.Equal(t, "0", res.Header.Get("X-RateLimit-Remaining"), "request %d", i)
				} else {
					for _, f := range rateFields {
						assert.Empty(t, res.Header.Values(f), "request %d: %s in shadow mode", i, f)
					}
				}
			}
			assert.Equal(t, int64(n), spec.Hits())
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, map[outcome.Outcome]int{outcome.Allowed: 1, outcome.ShadowDenied: n - 1}, outcomes)
		})
	}
}
