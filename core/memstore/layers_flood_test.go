package memstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// TestLayeredFloodKeepsTheLoginGuard floods a full Store through a layered
// Limiter (the four layers: global, user, login, ip) with logins
// from rotating addresses and users, each a fresh key in three layers, while
// a victim address keeps trying to log in: the victim gets exactly its 5
// logins, however many keys the flood pushes through, and the store stays
// within its cap. A flood address that uses its whole login quota holds
// back as much as the victim: the flood's newer states are evicted first,
// under the buckets too, whose older state has drained a fraction of a
// unit more.
func TestLayeredFloodKeepsTheLoginGuard(t *testing.T) {
	const maxKeys = 2_000
	perMinute := func(n int64) core.Policy {
		return core.Policy{Algorithm: core.SlidingWindowCounter, Limit: n, Window: time.Minute}
	}
	for _, attempts := range []int{1, 5} { // each flood address logs in once, or uses its whole login quota
		for _, alg := range limits.Algorithms[core.Algorithm]() {
			t.Run(fmt.Sprintf("%s/%d-per-address", alg, attempts), func(t *testing.T) {
				s := newStore(t, memstore.WithMaxKeys(maxKeys))
				login := core.Policy{Algorithm: alg, Limit: 5, Window: 15 * time.Minute}
				l, err := core.NewLimiter(s, []core.Policy{
					limitertest.Named(perMinute(limits.MaxLimit), "global"),
					limitertest.Named(perMinute(20), "user"),
					limitertest.Named(login, "login"),
					limitertest.Named(perMinute(300), "ip"),
				})
				require.NoError(t, err)
				ctx := context.Background()
				var v limitertest.Verdict
				now := t0
				logIn := func(ip, user string) bool {
					now = now.Add(time.Microsecond)
					err := limitertest.AllowLayers(l, ctx, []core.Request{
						{Key: "api", Cost: 1},
						{Key: user, Cost: 1},
						{Key: ip, Cost: 1},
						{Key: ip, Cost: 1},
					}, now, &v)

					require.NoError(t, err)
					return v.Allowed
				}
				victim := 0
				for range 5 {
					if logIn("ip:victim", "user:victim") {
						victim++
					}
				}
				require.Equal(t, 5, victim)
				// A minute on, a bucket has drained a third of a login:
				// not enough for one more.
				now = now.Add(time.Minute)
				for i := range 3 * maxKeys {
					ip, user := "ip:"+floodKey(i), fmt.Sprintf("user:%d", i)
					for range attempts {
						require.True(t, logIn(ip, user), "flood address %d", i)
					}
					if i%50 == 0 && logIn("ip:victim", "user:victim") {
						victim++
					}
				}
				assert.Equal(t, 5, victim, "the victim's login layer admitted more than 5 within its window under the flood")
				assert.LessOrEqual(t, s.Len(), maxKeys)
			})
		}
	}
}

// TestLayeredFloodKeepsTheGlobalLayer floods a full Store through a
// layered Limiter (a global layer, one key for every request, and a per-IP
// layer) with one request from each of many new addresses, three times
// the global limit: the global layer admits exactly its limit. Each new
// address holds back a tenth of its per-IP policy, more than the global
// key's share of its own large capacity; were eviction to weigh shares
// alone, the flood would evict the global key over and over, and its
// count with it.
func TestLayeredFloodKeepsTheGlobalLayer(t *testing.T) {
	const (
		maxKeys = 1_000
		global  = 20_000
	)
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(alg), func(t *testing.T) {
			s := newStore(t, memstore.WithMaxKeys(maxKeys))
			l, err := core.NewLimiter(s, []core.Policy{
				{Name: "global", Algorithm: alg, Limit: global, Window: time.Hour},
				{Name: "ip", Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour},
			})
			require.NoError(t, err)
			ctx := context.Background()
			var v limitertest.Verdict
			admitted := 0
			for i := range 3 * global {
				err := limitertest.AllowLayers(l, ctx, []core.Request{
					{Key: "api", Cost: 1},
					{Key: "ip:" + strconv.Itoa(i), Cost: 1},
				}, t0.Add(time.Duration(i)*time.Microsecond), &v)

				require.NoError(t, err)
				if v.Allowed {
					admitted++
				}
			}
			assert.Equal(t, global, admitted, "the global layer's limit, through a flood of %d new addresses", 3*global)
			assert.LessOrEqual(t, s.Len(), maxKeys)
		})
	}
}
