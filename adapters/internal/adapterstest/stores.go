package adapterstest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// storeCase is a store a socket suite runs its cases over: new makes one,
// with keys of its own.
type storeCase struct {
	name string
	new  func(t testing.TB) core.Store
}

// socketStores returns the stores the socket suites run over: memory, and
// the Redis of srv through a default go-redis client and, when
// withContextTimeout, through a ContextTimeoutEnabled one too (closed at
// the end of t), whose stores' keys start with prefix and a number of
// their own.
func socketStores(t *testing.T, srv *redistest.Server, prefix string, withContextTimeout bool) []storeCase {
	var n atomic.Int64
	redisStore := func(c redis.UniversalClient) func(t testing.TB) core.Store {
		return func(t testing.TB) core.Store {
			t.Helper()
			s, err := redisstore.New(c, redisstore.WithPrefix(fmt.Sprintf("%s%d:", prefix, n.Add(1))), redisstore.WithTimeout(limitertest.StoreTimeout))
			require.NoError(t, err)
			return s
		}
	}
	stores := []storeCase{
		{"memory", func(t testing.TB) core.Store { return NewStore(t) }},
		{"redis default client", redisStore(srv.Client())},
	}
	if withContextTimeout {
		opts := srv.Options()
		opts.ContextTimeoutEnabled = true
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		stores = append(stores, storeCase{"redis ContextTimeoutEnabled", redisStore(c)})
	}
	return stores
}

// failModes are what a Limiter does when its store fails, each as the
// policies' FailClosed and the options that make it so.
var failModes = []struct {
	name       string
	failClosed time.Duration
	opts       func(t testing.TB) []core.Option
}{
	{"fail open", 0, func(testing.TB) []core.Option { return nil }},
	{"fail closed", time.Second, func(testing.TB) []core.Option { return nil }},
	{"fallback", 0, func(t testing.TB) []core.Option { return []core.Option{core.WithFallback(NewStore(t))} }},
}

// failClosed returns layers with every policy's FailClosed set to d.
func failClosed(layers []httplimit.Layer, d time.Duration) []httplimit.Layer {
	out := make([]httplimit.Layer, len(layers))
	for i, ly := range layers {
		ly.Policy.FailClosed = d
		out[i] = ly
	}
	return out
}
