package bench

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/throttled/throttled/v2"
	tmemstore "github.com/throttled/throttled/v2/store/memstore"
	"github.com/ulule/limiter/v3"
	umemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

// memMaxKeys bounds the stores that take a bound (ours, throttled's LRU)
// above the million keys of the largest case, so that none evicts.
const memMaxKeys = 2_000_000

// memAllow is one library's in-memory decision for key.
type memAllow func(key string) (bool, error)

// memContender builds one library's in-memory limiter: limit requests per
// window. The returned func releases what the limiter holds (a janitor
// goroutine), or is nil.
type memContender struct {
	name  string
	build func(tb testing.TB, limit int64, window time.Duration) (memAllow, func())
}

var memContenders = []memContender{
	{name: "ours", build: func(tb testing.TB, limit int64, window time.Duration) (memAllow, func()) {
		st, err := memstore.New(memstore.WithMaxKeys(memMaxKeys))
		require.NoError(tb, err)
		l, err := core.NewLimiter(st, []core.Policy{{Name: "bench", Algorithm: core.TokenBucket, Limit: limit, Window: window}})
		require.NoError(tb, err)
		ctx := context.Background()
		return func(key string) (bool, error) {
			d, err := l.AllowN(ctx, key, 1, time.Time{})
			return d.Allowed, err
		}, func() { _ = st.Close() }
	}},
	{name: "xtime-rate", build: func(tb testing.TB, limit int64, window time.Duration) (memAllow, func()) {
		// One *rate.Limiter per key in a sync.Map, the usual way to key
		// x/time/rate (it has no store of its own, and no eviction).
		var m sync.Map
		r := rate.Limit(float64(limit) / window.Seconds())
		return func(key string) (bool, error) {
			v, ok := m.Load(key)
			if !ok {
				v, _ = m.LoadOrStore(key, rate.NewLimiter(r, int(limit)))
			}
			return v.(*rate.Limiter).Allow(), nil
		}, nil
	}},
	{name: "ulule", build: func(tb testing.TB, limit int64, window time.Duration) (memAllow, func()) {
		l := limiter.New(umemory.NewStore(), limiter.Rate{Period: window, Limit: limit})
		ctx := context.Background()
		return func(key string) (bool, error) {
			c, err := l.Get(ctx, key)
			return !c.Reached, err
		}, nil
	}},
	{name: "throttled", build: func(tb testing.TB, limit int64, window time.Duration) (memAllow, func()) {
		st, err := tmemstore.NewCtx(memMaxKeys)
		require.NoError(tb, err)
		l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerDuration(int(limit), window), MaxBurst: int(limit) - 1})
		require.NoError(tb, err)
		ctx := context.Background()
		return func(key string) (bool, error) {
			limited, _, err := l.RateLimitCtx(ctx, key, 1)
			return !limited, err
		}, nil
	}},
}

// BenchmarkMemory measures each library's in-memory store: one hot key
// from one goroutine and from 16, and one goroutine over a million keys
// that already hold state, for which it also reports the heap each key
// costs (bytes/key: runtime.MemStats.HeapAlloc after a GC, less the same
// before the keys were made, over a million).
func BenchmarkMemory(b *testing.B) {
	for _, g := range []int{1, 16} {
		for _, c := range memContenders {
			b.Run("hot-key-"+strconv.Itoa(g)+"g/"+c.name, func(b *testing.B) {
				allow, release := c.build(b, memNeverLimit, window)
				if release != nil {
					defer release()
				}
				key := tag() + "hot"
				run(b, g, 256, true, func(int) (bool, error) { return allow(key) })
			})
		}
	}
	for _, c := range memContenders {
		// The million keys are made once per library, on the first
		// invocation, and dropped before the next library's.
		var million *populated
		b.Run("1M-keys-1g/"+c.name, func(b *testing.B) {
			if million == nil {
				million = populate(b, c, 1_000_000)
			}
			keys, allow := million.keys, million.allow
			run(b, 1, 1, true, func(i int) (bool, error) {
				// A stride through the keys, so that consecutive
				// decisions do not share a cache line.
				return allow(keys[(i*7919)%len(keys)])
			})
			// After run: ResetTimer drops the metrics reported before it.
			b.ReportMetric(million.bytesPerKey, "bytes/key")
		})
		if million != nil && million.release != nil {
			million.release()
		}
		million = nil
		runtime.GC()
	}
}

// populated is a store holding state for many keys.
type populated struct {
	allow       memAllow
	release     func()
	keys        []string
	bytesPerKey float64
}

// populate builds c's limiter and makes one decision for each of n keys.
// Each key is a string of its own, made just before its decision as a
// request would make it, so that a store that keeps the caller's string
// pays for it and one that copies does not pay twice.
func populate(tb testing.TB, c memContender, n int) *populated {
	tb.Helper()
	p := &populated{}
	p.allow, p.release = c.build(tb, memNeverLimit, window)
	t := tag()
	before := heapAlloc()
	buf := make([]byte, 0, 32)
	for i := range n {
		buf = strconv.AppendInt(append(buf[:0], t...), int64(i), 10)
		ok, err := p.allow(string(buf))
		require.NoError(tb, err)
		require.True(tb, ok)
	}
	after := heapAlloc()
	p.bytesPerKey = float64(int64(after)-int64(before)) / float64(n)
	p.keys = make([]string, n)
	for i := range p.keys {
		p.keys[i] = t + strconv.Itoa(i)
	}
	return p
}

// heapAlloc returns HeapAlloc after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemContenders checks each library's in-memory limiter as the
// benchmarks build it: the never-reached policy allows, the flood policy
// admits exactly floodLimit and then denies.
func TestMemContenders(t *testing.T) {
	for _, c := range memContenders {
		t.Run(c.name, func(t *testing.T) {
			allow, release := c.build(t, memNeverLimit, window)
			if release != nil {
				defer release()
			}
			ok, err := allow("fresh")
			require.NoError(t, err)
			require.True(t, ok)

			flood, release2 := c.build(t, floodLimit, window)
			if release2 != nil {
				defer release2()
			}
			for range floodLimit {
				ok, err := flood("flood")
				require.NoError(t, err)
				require.True(t, ok)
			}
			ok, err = flood("flood")
			require.NoError(t, err)
			require.False(t, ok)
		})
	}
}
