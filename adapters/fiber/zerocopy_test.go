package fiberlimit_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/adapters/fiber"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/keyfuncs"
)

// zeroCopyClients is how many brand-new clients testZeroCopyKeys sends
// per case.
const zeroCopyClients = 24

// zeroCopyKey returns the key of client i, n bytes long. Keys of 65 to
// 128 bytes of printable ASCII are kept by the Limiter as they are (no
// digest), and Go's maps tell such long keys apart by their length and
// ends before comparing them whole: a kept key rewritten in place into
// the next client's key of the same length is found as that client's.
func zeroCopyKey(i, n int) string {
	k := fmt.Sprintf("client-%04d-", i)
	return k + strings.Repeat("k", n-len(k))
}

// testZeroCopyKeys is issue #6 item 5: a key function that returns
// Fiber's zero-copy c.Get, a string over fasthttp's request buffer, which
// the next request on the connection rewrites in place. Every key the
// library keeps (the deny cache's, the memory store's) must be its own
// copy: each brand-new client gets 200 on its first request and 429 on
// its second, on one kept-alive connection.
func testZeroCopyKeys(t *testing.T, srv *redistest.Server) {
	memory := func(t *testing.T) core.Store {
		s, err := memstore.New()
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	var prefix atomic.Int64
	redis := func(t *testing.T) core.Store {
		s, err := redisstore.New(srv.Client(), redisstore.WithPrefix(fmt.Sprintf("zerocopy%d:", prefix.Add(1))), redisstore.WithTimeout(limitertest.StoreTimeout))
		require.NoError(t, err)
		return s
	}
	cases := []struct {
		name      string
		store     func(t *testing.T) core.Store
		denyCache bool
	}{
		{"memory, deny cache", memory, true},
		{"memory", memory, false},
		{"redis, deny cache", redis, true},
	}
	for _, tc := range cases {
		for _, n := range []int{65, 100, 128} {
			t.Run(fmt.Sprintf("%s/%d bytes", tc.name, n), func(t *testing.T) {
				var lopts []core.Option
				if tc.denyCache {
					lopts = append(lopts, core.WithDenyCache(1000))
				}
				runZeroCopyKeys(t, tc.store(t), lopts, n)
			})
		}
	}
}

func runZeroCopyKeys(t *testing.T, store core.Store, lopts []core.Option, n int) {
	p := core.Policy{Name: "zerocopy", Algorithm: core.SlidingWindowLog, Limit: 1, Window: time.Hour}
	zeroCopy := func(r keyfuncs.Request) (string, error) {
		c, _ := fiberlimit.Unwrap(r)
		if k := c.Get("X-Client"); k != "" {
			return k, nil // points into fasthttp's buffer
		}
		return "", keyfuncs.ErrNoKey
	}
	flow, err := httplimit.New(store, []httplimit.Layer{{Policy: p, Key: zeroCopy}}, httplimit.WithCore(lopts...))
	require.NoError(t, err)
	a := newApp(func(f *fiber.App) {
		f.Use(fiberlimit.New(flow))
		f.Get("/", func(c *fiber.Ctx) error { return c.SendString(adapterstest.Body) })
	})
	conn := adapterstest.Dial(t, a.listen(t))
	var wrong []string
	for i := range zeroCopyClients {
		req := adapterstest.RawRequest{Header: http.Header{"X-Client": {zeroCopyKey(i, n)}}}
		first, second := conn.Do(t, req).Status, conn.Do(t, req).Status
		if first != 200 || second != 429 {
			wrong = append(wrong, fmt.Sprintf("client %d: %d then %d", i, first, second))
		}
	}
	assert.Empty(t, wrong, "want 200 then 429 for each new client")
}
