package adapterstest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"context"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/reputation"
)

// The request every adapter benchmark serves: GET BenchPath from
// BenchPeer, to a route registered as "/users/:id" (chi: "/users/{id}").
const (
	BenchPath = "/users/1"
	BenchPeer = "203.0.113.7:51234"
)

// Bench runs an adapter's three sub-benchmarks, NoLimiter, Limiter and
// LimiterUntimed. build returns the app to measure: with no limiter when f
// is nil, else with New(f) mounted for every request, f being one fixed
// window whose quota never runs out, over a memory store (LimiterUntimed:
// one that does not tell the time it decided at), on the real clock. serve
// measures the app with b.Loop. Apps are built outside the measurement.
func Bench[H any](b *testing.B, build func(f *httplimit.Flow) H, serve func(b *testing.B, h H)) {
	layers := []httplimit.Layer{{Policy: core.Policy{Algorithm: core.FixedWindow, Limit: limits.MaxLimit, Window: time.Hour}}}
	for _, name := range []string{"NoLimiter", "Limiter", "LimiterUntimed", "LimiterReputation"} {
		var f *httplimit.Flow
		var err error
		switch name {
		case "Limiter":
			f, err = httplimit.New(NewStore(b), layers)
		case "LimiterUntimed":
			f, err = httplimit.New(untimed{NewStore(b)}, layers)
		case "LimiterReputation": // a reputation that bans: its bans matched, the status read, Report's context
			var rep *reputation.Tracker
			if rep, err = reputation.New(reputation.Config{Bands: repBands}); err == nil {
				f, err = httplimit.New(NewStore(b), layers, httplimit.WithReputation(rep))
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		h := build(f)
		b.Run(name, func(b *testing.B) { serve(b, h) })
	}
}

// BenchUnroutedPath is the path BenchNotFound's apps route nowhere: a
// scanner's probe.
const BenchUnroutedPath = "/wp-admin/setup.php"

// BenchNotFound runs an adapter's sub-benchmarks of a 404 with a
// reputation (one that never bans), in apps of 10 and 200 routes. build
// returns the app to measure: New(f) mounted for every request, routes
// routes "/r<i>/:id", and whatever answers a path no
// route serves (the framework's own 404 or the idiom's handler). serve
// measures the app with b.Loop, on GET BenchUnroutedPath from BenchPeer,
// wanting 404. Apps are built outside the measurement.
func BenchNotFound[H any](b *testing.B, build func(f *httplimit.Flow, routes int) H, serve func(b *testing.B, h H)) {
	for _, n := range []int{10, 200} {
		b.Run(strconv.Itoa(n)+"routes", func(b *testing.B) {
			rep, err := reputation.New(reputation.Config{Bands: []reputation.Band{{Name: "never", Above: 1e15, Ban: true}}})
			if err != nil {
				b.Fatal(err)
			}
			f, err := httplimit.New(NewStore(b), []httplimit.Layer{{Policy: core.Policy{Algorithm: core.FixedWindow, Limit: 1_000_000_000_000, Window: time.Hour}}}, httplimit.WithReputation(rep))
			if err != nil {
				b.Fatal(err)
			}
			serve(b, build(f, n))
		})
	}
}

// untimed is a memory store behind a wrapper that returns no decision
// time: the headers' Writer reads the clock instead. Beside Limiter,
// LimiterUntimed measures what that time saves.
type untimed struct{ *memstore.Store }

// Take is the memory store's, without its decision time.
func (u untimed) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	_, err := u.Store.Take(ctx, now, reqs, out)
	return time.Time{}, err
}

// BenchHTTP is Bench for a framework whose app is an http.Handler: it
// serves the benchmark request, reused, into a ResponseWriter that keeps
// nothing, so that only the framework and the limiter are measured.
func BenchHTTP(b *testing.B, build func(f *httplimit.Flow) http.Handler) {
	Bench(b, build, func(b *testing.B, h http.Handler) {
		req := httptest.NewRequest("GET", BenchPath, nil)
		req.RemoteAddr = BenchPeer
		w := &discard{h: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			clear(w.h)
			h.ServeHTTP(w, req)
		}
	})
}

// discard is a ResponseWriter that keeps nothing but its header map,
// cleared before each request.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
