package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/redistest"
)

// TestCluster runs every algorithm over a Redis Cluster of three masters on
// 120 client keys: no CROSSSLOT or MOVED error surfaces, the keys spread
// over every master, and each client key admits exactly its limit.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	s := New(c, WithPrefix(testPrefix(t)))
	ctx := context.Background()
	const limit, keys, workers = 7, 120, 8

	ps := policies(limit, time.Hour)
	// The clock stands still, so that no bucket refills during the test.
	lims := make([]*core.Limiter, len(ps))
	for i, p := range ps {
		l, err := core.NewLimiter(s, p, core.WithTimeout(5*time.Second), core.WithClock(func() time.Time { return t0 }))
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = l
	}
	var (
		mu       sync.Mutex
		admitted = map[string]int{}
		wg       sync.WaitGroup
		errs     = make(chan error, workers)
	)
	for wk := range workers {
		wg.Go(func() {
			for k := wk; k < keys; k += workers {
				key := fmt.Sprintf("client-%d", k)
				for _, l := range lims {
					for range limit + 3 {
						d, err := l.Allow(ctx, key)
						if err != nil {
							errs <- fmt.Errorf("%s %s: %w", l.Policy().Algorithm, key, err)
							return
						}
						if d.Allowed {
							mu.Lock()
							admitted[string(l.Policy().Algorithm)+" "+key]++
							mu.Unlock()
						}
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, p := range ps {
		for k := range keys {
			if n := admitted[fmt.Sprintf("%s client-%d", p.Algorithm, k)]; n != limit {
				t.Errorf("%s client-%d: %d admitted, want %d", p.Algorithm, k, n, limit)
			}
		}
	}

	// The keys spread over all masters.
	masters := map[string]int{}
	for k := range keys {
		base := s.Key(fmt.Sprintf("client-%d", k), ps[0])
		m, err := c.MasterForKey(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr]++
	}
	if len(masters) != 3 {
		t.Fatalf("keys on %d masters, want 3: %v", len(masters), masters)
	}

	// Every key written has a TTL.
	all := scanKeys(t, ctx, c, s.prefix)
	if want := keys * len(ps); len(all) != want {
		t.Fatalf("scanned %d keys, want %d", len(all), want)
	}
	for _, k := range all {
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s: PTTL %v", k, ttl)
		}
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := s.Reset(ctx, "client-0", p); err != nil {
			t.Fatalf("Reset over the cluster: %v", err)
		}
	}
}
