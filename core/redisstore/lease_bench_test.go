package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// BenchmarkLease measures a global layer over a local redis-server, leased
// and not (Redis TIME, no explicit clock): alone, and with a per-client
// layer over 10,000 clients, which asks Redis for every request. It
// reports the round trips per decision (trips/op): a leased layer adds
// none to the per-client layer's one.
func BenchmarkLease(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	clients := make([]string, 10_000)
	for i := range clients {
		clients[i] = "client-" + strconv.Itoa(i)
	}
	global := core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 1_000_000_000, Window: time.Minute}
	client := core.Policy{Name: "client", Algorithm: core.TokenBucket, Limit: 1_000_000, Window: time.Second}
	for _, layered := range []bool{false, true} {
		for _, lease := range []time.Duration{0, 6 * time.Second} {
			name := map[bool]string{false: "global", true: "layered"}[layered] + map[bool]string{false: "/plain", true: "/leased"}[lease > 0]
			b.Run(name, func(b *testing.B) {
				st := &limitertest.Counting{Store: mustNew(b, srv.Client(), WithPrefix(testPrefix(b)))}
				g := global
				g.Lease = lease
				ps := []core.Policy{g}
				if layered {
					ps = append(ps, client)
				}
				l, err := core.NewLimiter(st, ps)
				if err != nil {
					b.Fatal(err)
				}
				reqs := make([]core.Request, len(ps))
				decide := func(i int) {
					reqs[0] = core.Request{Key: "api", Cost: 1}
					if layered {
						reqs[1] = core.Request{Key: clients[i%len(clients)], Cost: 1}
					}
					d, _, err := l.AllowLayers(ctx, time.Time{}, reqs, nil)
					if err != nil || !d.Allowed {
						b.Fatalf("%+v, %v", d, err)
					}
				}
				for i := range 2_000 { // shares grown to the rate
					decide(i)
				}
				before := (st.Takes() + st.Refunds())
				b.ReportAllocs()
				b.ResetTimer()
				i := 0
				for b.Loop() {
					decide(i)
					i++
				}
				b.StopTimer()
				b.ReportMetric(float64((st.Takes()+st.Refunds())-before)/float64(b.N), "trips/op")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			})
		}
	}
}
