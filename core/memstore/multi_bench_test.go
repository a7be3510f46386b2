package memstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
)

// benchLayerKeys are the keys of a request under four layers: the whole
// API, a user, an endpoint, an address.
var benchLayerKeys = [4]string{"global", "user-42", "GET:/items", "203.0.113.7"}

// benchLayers returns the requests of n layers (1 or 4), token buckets that
// admit every request, at the store's clock; g makes the user and address
// keys a goroutine's own.
func benchLayers(n, g int) []core.Request {
	reqs := make([]core.Request, n)
	for i := range reqs {
		p := benchPolicy(core.TokenBucket)
		p.Name = "layer" + strconv.Itoa(i)
		key := benchLayerKeys[i]
		if g > 0 && (i == 1 || i == 3) {
			key += "-" + strconv.Itoa(g)
		}
		reqs[i] = core.Request{Key: key, Policy: p, Cost: 1}
	}
	return reqs
}

// BenchmarkTakeAll decides requests of 1 and 4 layers on existing keys, on
// one goroutine and in parallel (the global and endpoint keys shared by
// every goroutine, the user and address keys each goroutine's own), beside
// Take of the one layer.
func BenchmarkTakeAll(b *testing.B) {
	ctx := context.Background()
	b.Run("take", func(b *testing.B) {
		s := mustNew(b)
		req := benchLayers(1, 0)[0]
		b.ReportAllocs()
		for b.Loop() {
			if d, _, err := memstore.TakeOne(s, ctx, time.Time{}, req); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	for _, n := range []int{1, 4} {
		b.Run(strconv.Itoa(n)+"-layers", func(b *testing.B) {
			s := mustNew(b)
			reqs := benchLayers(n, 0)
			out := make([]core.Decision, n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Take(ctx, time.Time{}, reqs, out); err != nil || !out[0].Allowed {
					b.Fatal(out[0], err)
				}
			}
		})
		b.Run(strconv.Itoa(n)+"-layers/parallel", func(b *testing.B) {
			s := mustNew(b)
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				reqs := benchLayers(n, int(next.Add(1)))
				out := make([]core.Decision, n)
				for pb.Next() {
					if _, err := s.Take(ctx, time.Time{}, reqs, out); err != nil || !out[0].Allowed {
						b.Error(out[0], err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkLayeredLimiter decides through core.Limiter: AllowLayers over
// four layers, beside AllowN on a Limiter of the one policy.
func BenchmarkLayeredLimiter(b *testing.B) {
	ctx := context.Background()
	b.Run("AllowN-1-policy", func(b *testing.B) {
		s := mustNew(b)
		l := newLimiter(b, s, benchPolicy(core.TokenBucket))
		b.ReportAllocs()
		for b.Loop() {
			if d, err := l.AllowN(ctx, benchLayerKeys[0], 1, time.Time{}); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	b.Run("AllowLayers-4-layers", func(b *testing.B) {
		s := mustNew(b)
		layers := make([]core.Policy, 4)
		checks := make([]core.Request, 4)
		for i := range layers {
			layers[i] = limitertest.Named(benchPolicy(core.TokenBucket), "layer"+strconv.Itoa(i))
			checks[i] = core.Request{Key: benchLayerKeys[i], Cost: 1}
		}
		l, err := core.NewLimiter(s, layers)
		if err != nil {
			b.Fatal(err)
		}
		var v limitertest.Verdict
		b.ReportAllocs()
		for b.Loop() {
			if err := limitertest.AllowLayers(l, ctx, checks, time.Time{}, &v); err != nil || !v.Allowed {
				b.Fatal(v.Decision, err)
			}
		}
	})
}
