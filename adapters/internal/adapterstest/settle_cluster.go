package adapterstest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/keyfuncs"
)

// RunSettleCluster plays the README's layered login over real sockets on
// a Redis Cluster of three masters, from two app servers, at Redis's own
// clock: a global layer, and a failure-only login limit of 5 per 15
// minutes by address, both sliding logs, their keys in different slots.
// 150 good logins, 5 at a time, alternating the app servers, must all
// pass, and leave the login layer holding nothing: a successful login
// counts for nothing, whatever the logins racing it took on the global
// layer. (A give-back dated with a time other than where its slot
// recorded the units misses them: good logins then lock their user out.)
func RunSettleCluster(t *testing.T, h SocketHarness) {
	cl := redistest.StartCluster(t)
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("127.0.0.0/8"))
	require.NoError(t, err)
	global := keyfuncs.Func(func(keyfuncs.Request) (string, error) { return "global", nil })
	layers := []httplimit.Layer{
		{Policy: core.Policy{Name: "global", Algorithm: core.SlidingWindowLog, Limit: 100_000, Window: time.Minute}, Key: global},
		{Policy: core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 15 * time.Minute},
			Key: client.Key, Methods: []string{"POST"}, Routes: []string{"/login"}, Counts: httplimit.CountFailures},
	}
	prefix := fmt.Sprintf("settle-cluster%d:", settlePrefixes.Add(1))
	spec := &Spec{Routes: []Route{{Method: "POST", Path: "/login"}}}
	var addrs []string
	var flows []*httplimit.Flow
	for range 2 { // two app servers, each with its own cluster client
		c := cl.Client()
		t.Cleanup(func() { _ = c.Close() })
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithTimeout(limitertest.StoreTimeout))
		require.NoError(t, err)
		f := NewFlow(t, s, layers, nil, httplimit.WithClientIP(client))
		spec.Global = []Mount{{Flow: f}}
		addrs = append(addrs, h.Serve(t, spec))
		flows = append(flows, f)
	}
	const ip, logins, together = "198.51.100.20", 150, 5
	hd := http.Header{"X-Forwarded-For": {ip}}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		refused []int
	)
	for g := range together {
		wg.Go(func() {
			for i := g; i < logins; i += together {
				res := Send(t, addrs[i%len(addrs)], RawRequest{Method: "POST", Path: "/login", Header: hd})
				if res.Status == http.StatusTooManyRequests {
					mu.Lock()
					refused = append(refused, i)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	assert.Empty(t, refused, "good logins refused with 429")
	ok, failed := spec.Outcomes()
	assert.Equal(t, int64(logins-len(refused)), ok)
	assert.Zero(t, failed)
	out := make([]core.Decision, 2)
	require.NoError(t, flows[0].Limiter().Peek(context.Background(), time.Time{},
		[]core.Request{{Key: "global"}, {Key: "ip:" + ip}}, out))
	assert.Equal(t, int64(0), out[1].Limit-out[1].Remaining, "the login layer holds nothing, with nothing in flight")
	assert.Equal(t, int64(logins-len(refused)), out[0].Limit-out[0].Remaining, "the global layer counts every login it admitted")
}
