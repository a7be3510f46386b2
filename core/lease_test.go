package core_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/leasebound"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// leaseT0 starts a fixed window of a minute, and of a second.
var leaseT0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// countingStore is a real store that counts the calls made of it per key,
// and fails every call while down is set.
type countingStore struct {
	core.Store
	mu    sync.Mutex
	takes map[string]int
	down  atomic.Bool
}

var errLeaseDown = errors.New("store down")

func newCounting(s core.Store) *countingStore {
	return &countingStore{Store: s, takes: map[string]int{}}
}

func (s *countingStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	s.mu.Lock()
	for i := range reqs {
		s.takes[reqs[i].Key]++
	}
	s.mu.Unlock()
	if s.down.Load() {
		return time.Time{}, errLeaseDown
	}
	return s.Store.Take(ctx, now, reqs, out)
}

func (s *countingStore) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	if s.down.Load() {
		return errLeaseDown
	}
	return s.Store.Refund(ctx, at, reqs)
}

func (s *countingStore) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takes[key]
}

func TestLeaseValidation(t *testing.T) {
	base := core.Policy{Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}
	for _, tc := range []struct {
		name string
		edit func(p *core.Policy)
		want string
	}{
		{"negative", func(p *core.Policy) { p.Lease = -time.Second }, "lease -1s is out of range"},
		{"under 1ms", func(p *core.Policy) { p.Lease = time.Microsecond }, "out of range"},
		{"over the window", func(p *core.Policy) { p.Lease = 2 * time.Minute }, "out of range"},
		{"sliding log", func(p *core.Policy) { p.Algorithm, p.Lease = core.SlidingWindowLog, time.Second }, "sliding_window_log cannot be leased"},
		{"leaky bucket", func(p *core.Policy) { p.Algorithm, p.Lease = core.LeakyBucket, time.Second }, "leaky_bucket cannot be leased"},
		{"lockout", func(p *core.Policy) { p.Lockout, p.Lease = time.Minute, time.Second }, "Lockout cannot be leased"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := base
			tc.edit(&p)
			err := p.Validate()
			require.ErrorIs(t, err, core.ErrInvalidOption)
			assert.Contains(t, err.Error(), tc.want)
			_, err = core.NewLimiter(newMemStore(t), []core.Policy{p})
			require.ErrorIs(t, err, core.ErrInvalidOption)
		})
	}
	for _, a := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter, core.TokenBucket, ""} {
		p := base
		p.Algorithm, p.Lease = a, time.Second
		require.NoError(t, p.Validate(), a)
	}
}

// TestLeaseFixedWindowNeverExceeds: servers with skewed, moving demand
// above the limit, on a virtual clock, never admit more than the limit in
// a window, use nearly all of it, and ask the store far less than once a
// request.
func TestLeaseFixedWindowNeverExceeds(t *testing.T) {
	for _, alg := range []core.Algorithm{core.FixedWindow, core.SlidingWindowCounter} {
		t.Run(string(alg), func(t *testing.T) {
			store := newCounting(newMemStore(t))
			// A window algorithm admits no more with leases of any
			// lifetime: a tenth of the window.
			p := core.Policy{Name: "global", Algorithm: alg, Limit: 20_000, Window: time.Second, Lease: 100 * time.Millisecond}
			servers := leasebound.Fleet(t, store, 16, p)
			rng := rand.New(rand.NewPCG(1, 2))
			ctx := context.Background()
			perWindow := map[int64]int64{}
			requests := 0
			var hot int
			for ms := range 5_000 { // 5 s, each ms some requests
				now := leaseT0.Add(time.Duration(ms) * time.Millisecond)
				if ms%700 == 0 {
					hot = rng.IntN(len(servers)) // traffic moves
				}
				for range 30 { // 30,000/s, over the limit of 20,000/s
					s := hot
					if rng.IntN(3) == 0 {
						s = rng.IntN(len(servers))
					}
					d, _, err := servers[s].AllowLayers(ctx, now, []core.Request{{Key: "api", Cost: 1}}, nil)
					require.NoError(t, err)
					requests++
					if d.Allowed {
						perWindow[now.UnixMilli()/1000]++
					}
				}
			}
			var total int64
			for w, n := range perWindow {
				assert.LessOrEqual(t, n, p.Limit, "window %d", w)
				total += n
			}
			if alg == core.FixedWindow {
				// Demand is above the limit: at least 99% of it is used.
				assert.GreaterOrEqual(t, float64(total), 0.99*float64(5*p.Limit), "used %d of %d", total, 5*p.Limit)
			}
			takes := store.count("api")
			assert.Less(t, takes*20, requests, "%d store takes for %d requests", takes, requests)
			t.Logf("%s: admitted %d of %d (limit %d), %d store takes for %d requests", alg, total, requests, 5*p.Limit, takes, requests)
		})
	}
}

// TestLeaseTokenBucketBound: a token bucket's admissions over any
// interval exceed what the bucket allows by at most the rate times the
// lease.
func TestLeaseTokenBucketBound(t *testing.T) {
	store := newMemStore(t)
	p := core.Policy{Name: "global", Algorithm: core.TokenBucket, Limit: 10_000, Window: time.Second, Burst: 1_000, Lease: 10 * time.Millisecond}
	servers := leasebound.Fleet(t, store, 8, p)
	rng := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	const ms = 3_000
	admitted := make([]int64, ms)
	for i := range ms {
		now := leaseT0.Add(time.Duration(i) * time.Millisecond)
		for range rng.IntN(40) {
			d, _, err := servers[rng.IntN(len(servers))].AllowLayers(ctx, now, []core.Request{{Key: "api", Cost: 1}}, nil)
			require.NoError(t, err)
			if d.Allowed {
				admitted[i]++
			}
		}
	}
	rate := float64(p.Limit) / float64(p.Window.Milliseconds()) // per ms
	lease := float64(p.Lease.Milliseconds())
	for i := range ms {
		sum := int64(0)
		for j := i; j < ms; j++ {
			sum += admitted[j]
			if bound := float64(p.Burst) + rate*float64(j-i+1) + rate*lease; float64(sum) > bound {
				t.Fatalf("[%d, %d] ms: %d admitted, more than %.1f", i, j, sum, bound)
			}
		}
	}
}

// TestLeaseAllOrNothing: a request another layer denies spends none of the
// leased layer's quota.
func TestLeaseAllOrNothing(t *testing.T) {
	store := newMemStore(t)
	global := core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute, Lease: time.Second}
	client := core.Policy{Name: "client", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}
	l := leasebound.Fleet(t, store, 1, global, client)[0]
	ctx := context.Background()
	admitted := 0
	for i := range 300 {
		// Every other request is a second one of a client: denied by its
		// client layer.
		key := fmt.Sprint("c", i/2)
		at := leaseT0.Add(time.Duration(i) * 10 * time.Millisecond)
		d, _, err := l.AllowLayers(ctx, at, []core.Request{{Key: "api", Cost: 1}, {Key: key, Cost: 1}}, nil)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		} else if i%2 == 1 && i < 180 {
			assert.Equal(t, "client", d.Policy.Name, "request %d", i)
		}
	}
	assert.Equal(t, 100, admitted, "the global limit, all of it, and no more")
}

// TestLeaseOutage: with the store down, a server decides from what it
// holds until its grant expires, then by the fail mode.
func TestLeaseOutage(t *testing.T) {
	store := newCounting(newMemStore(t))
	p := core.Policy{Name: "global", Algorithm: core.TokenBucket, Limit: 1_000, Window: time.Second, Lease: 100 * time.Millisecond, FailClosed: time.Second}
	l := leasebound.Fleet(t, store, 1, p)[0]
	ctx := context.Background()
	ask := func(at time.Duration) core.Decision {
		d, _, err := l.AllowLayers(ctx, leaseT0.Add(at), []core.Request{{Key: "api", Cost: 1}}, nil)
		require.NoError(t, err)
		return d
	}
	for i := range 50 { // grow a share
		ask(time.Duration(i) * time.Millisecond)
	}
	d := ask(50 * time.Millisecond)
	require.True(t, d.Allowed)
	require.Equal(t, core.SourceLease, d.Source)
	store.down.Store(true)
	d = ask(51 * time.Millisecond)
	assert.True(t, d.Allowed, "decided from the grant it holds")
	assert.Equal(t, core.SourceLease, d.Source)
	d = ask(500 * time.Millisecond) // every grant has expired
	assert.False(t, d.Allowed)
	assert.Equal(t, core.SourceFailMode, d.Source)
	require.ErrorIs(t, d.Err, errLeaseDown)
}

// TestLeaseRefundAndReset: an admission decided from a grant can be
// refunded (its time dates it), and Reset forgets the grants.
func TestLeaseRefundAndReset(t *testing.T) {
	store := newMemStore(t)
	p := core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute, Lease: time.Minute}
	l := leasebound.Fleet(t, store, 1, p)[0]
	ctx := context.Background()
	var last time.Time
	for range 10 {
		d, took, err := l.AllowLayers(ctx, leaseT0, []core.Request{{Key: "api", Cost: 1}}, nil)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.False(t, took.IsZero())
		last = took
	}
	d, _, err := l.AllowLayers(ctx, leaseT0, []core.Request{{Key: "api", Cost: 1}}, nil)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.NoError(t, l.Refund(ctx, last, []core.Request{{Key: "api", Cost: 1}}))
	d, _, err = l.AllowLayers(ctx, leaseT0.Add(time.Second), []core.Request{{Key: "api", Cost: 1}}, nil)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the refunded unit")
	require.NoError(t, l.Reset(ctx, "api"))
	d, _, err = l.AllowLayers(ctx, leaseT0.Add(2*time.Second), []core.Request{{Key: "api", Cost: 1}}, nil)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "reset")
}

// TestLeaseConcurrent: servers on the real clock, renewing on goroutines
// of their own, with many goroutines each, admit exactly the limit of a
// window that does not end during the test.
func TestLeaseConcurrent(t *testing.T) {
	store := newMemStore(t)
	p := core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 5_000, Window: time.Hour, Lease: time.Minute}
	servers := leasebound.Fleet(t, store, 4, p)
	ctx := context.Background()
	var admitted, lease atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := servers[g%len(servers)]
			for range 1_000 {
				d, err := l.AllowN(ctx, "api", 1, time.Time{})
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
				if d.Source == core.SourceLease {
					lease.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// The window (an hour, from its start) may end during the test only
	// if it started just before: then each window holds at most the limit.
	assert.LessOrEqual(t, admitted.Load(), 2*p.Limit)
	if time.Now().Truncate(time.Hour) == time.Now().Add(-time.Minute).Truncate(time.Hour) {
		assert.LessOrEqual(t, admitted.Load(), p.Limit)
	}
	assert.Greater(t, lease.Load(), int64(4_000), "decided from a lease: %d", lease.Load())
}

// TestLeaseGivesBackOnExpiry: on the real clock, what a grant did not
// admit goes back to the store when it expires, though the server decides
// nothing more of the key.
func TestLeaseGivesBackOnExpiry(t *testing.T) {
	store := newMemStore(t)
	p := core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 1_000_000, Window: time.Hour, Lease: 50 * time.Millisecond}
	l := leasebound.Fleet(t, store, 1, p)[0]
	ctx := context.Background()
	storeLeft := func() int64 {
		out := make([]core.Decision, 1)
		require.NoError(t, store.Peek(ctx, time.Time{}, []core.Request{{Key: "api", Policy: l.Policies()[0], Cost: 1}}, out))
		return out[0].Remaining
	}
	// Requests until the server holds units it has not admitted (the
	// store has less left than the admissions took).
	admitted := int64(0)
	testwait.For(t, 2*time.Second, time.Millisecond, func() bool {
		d, err := l.AllowN(ctx, "api", 1, time.Time{})
		require.NoError(t, err)
		require.True(t, d.Allowed)
		admitted++
		return storeLeft() < p.Limit-admitted
	}, "the server holds a share")
	// Unless the hour ended meanwhile, the store gets back all but the
	// admitted, though the server decides nothing more.
	testwait.For(t, 2*time.Second, 5*time.Millisecond, func() bool {
		left := storeLeft()
		return left == p.Limit-admitted || left == p.Limit
	}, "the store has back what the grants did not admit: %d left, %d admitted", storeLeft(), admitted)
}

// TestLeaseGrantEndsWithItsWindow: a grant taken less than a microsecond
// before its window ends (the stores date to the microsecond) admits
// nothing past that end: the next window is the store's, whole; over a
// store that returns the request's time, and one that returns its
// microsecond (leasebound.Micro, as the Redis store does).
func TestLeaseGrantEndsWithItsWindow(t *testing.T) {
	for name, store := range map[string]core.Store{"nanoseconds": newMemStore(t), "microseconds": leasebound.Micro{Store: newMemStore(t)}} {
		t.Run(name, func(t *testing.T) { testLeaseGrantEnds(t, store) })
	}
}

func testLeaseGrantEnds(t *testing.T, store core.Store) {
	p := core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 100, Window: time.Second, Lease: time.Millisecond}
	a := leasebound.Fleet(t, store, 1, p)[0]
	plain := p
	plain.Lease = 0
	b := leasebound.Fleet(t, store, 1, plain)[0] // not leased: decided by the store
	ctx := context.Background()
	end := leaseT0.Add(time.Second)
	ask := func(l *core.Limiter, at time.Time, cost int64) core.Decision {
		d, _, err := l.AllowLayers(ctx, at, []core.Request{{Key: "api", Cost: cost}}, nil)
		require.NoError(t, err)
		return d
	}
	// A renews at each request (its last grant has expired), its share
	// growing to more than the cost: the last renewal, 500ns before the
	// end, leaves it units.
	var d core.Decision
	for k := 10; k >= 0; k-- {
		d = ask(a, end.Add(-500*time.Nanosecond-time.Duration(k)*time.Millisecond), 8)
		require.True(t, d.Allowed, "k=%d", k)
	}
	require.Equal(t, core.SourceLease, d.Source, "the last renewal left units")
	d = ask(b, end, p.Limit) // the next window, all of it, from the store
	require.True(t, d.Allowed)
	require.Equal(t, core.SourceStore, d.Source)
	d = ask(a, end.Add(time.Nanosecond), 1)
	assert.False(t, d.Allowed, "admitted at %v from a grant of the window before: %+v", end.Add(time.Nanosecond), d)
}

// TestLeaseRefundDatedByEarliestTake: the time that dates a Refund of an
// admission is no later than any of its layers' units were taken (a
// grant's take, or the store's decision of the other layers): a token
// bucket's give-back dated later would give back what drained since.
func TestLeaseRefundDatedByEarliestTake(t *testing.T) {
	client := core.Policy{Name: "client", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}
	global := core.Policy{Name: "global", Algorithm: core.TokenBucket, Limit: 1, Window: 10 * time.Second, Lease: 10 * time.Second}
	l := leasebound.Fleet(t, newMemStore(t), 1, client, global)[0]
	ctx := context.Background()
	ask := func(at time.Time, reqs ...core.Request) (core.Decision, time.Time) {
		d, took, err := l.AllowLayers(ctx, at, reqs, nil)
		require.NoError(t, err)
		return d, took
	}
	d, _ := ask(leaseT0, core.Request{Key: "full", Cost: 1})
	require.True(t, d.Allowed)
	// The global layer takes a grant of 1 at leaseT0 and keeps it: the
	// client layer denies.
	d, _ = ask(leaseT0, core.Request{Key: "full", Cost: 1}, core.Request{Key: "api", Cost: 1})
	require.False(t, d.Allowed)
	d, took := ask(leaseT0.Add(5*time.Second), core.Request{Key: "other", Cost: 1}, core.Request{Key: "api", Cost: 1})
	require.True(t, d.Allowed)
	assert.Equal(t, leaseT0, took, "dated by the grant's take, not the store's decision of the client layer")
}

// TestLeaseCallerGone: a request whose caller leaves while the store
// decides its other layers takes nothing from the leased layer.
func TestLeaseCallerGone(t *testing.T) {
	store := newMemStore(t)
	global := core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 50, Window: time.Minute, Lease: time.Second}
	client := core.Policy{Name: "client", Algorithm: core.FixedWindow, Limit: 1_000, Window: time.Minute}
	l := leasebound.Fleet(t, store, 1, global, client)[0]
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	admitted := 0
	for i := range 200 {
		ctx := context.Background()
		if i%2 == 1 {
			ctx = gone
		}
		at := leaseT0.Add(time.Duration(i) * time.Millisecond)
		d, _, err := l.AllowLayers(ctx, at, []core.Request{{Key: "api", Cost: 1}, {Key: "c", Cost: 1}}, nil)
		if ctx == gone {
			require.ErrorIs(t, err, context.Canceled, "request %d: %+v", i, d)
			continue
		}
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 50, admitted, "the callers that left took nothing")
}

// TestLeaseDearRequest: one request of a huge cost on a leased layer does
// not make a share that takes the quota: it goes to the store. (Were the
// share sized to it, a denial by another layer would leave the server
// holding it for a lifetime.)
func TestLeaseDearRequest(t *testing.T) {
	store := newMemStore(t)
	p := core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 1_000_000, Window: time.Minute, Lease: time.Second}
	client := core.Policy{Name: "client", Algorithm: core.FixedWindow, Limit: 400_000, Window: time.Minute}
	l := leasebound.Fleet(t, store, 1, p, client)[0]
	ctx := context.Background()
	ask := func(at time.Duration, key string, cost int64) core.Decision {
		d, _, err := l.AllowLayers(ctx, leaseT0.Add(at), []core.Request{{Key: "api", Cost: cost}, {Key: key, Cost: cost}}, nil)
		require.NoError(t, err)
		return d
	}
	admitted := int64(0)
	for i := range 1_000 { // 1 a millisecond
		if ask(time.Duration(i)*time.Millisecond, fmt.Sprint("c", i), 1).Allowed {
			admitted++
		}
	}
	require.True(t, ask(time.Second, "dear", 300_000).Allowed)
	d := ask(time.Second+time.Millisecond, "dear", 300_000) // its client layer denies it
	require.False(t, d.Allowed)
	require.Equal(t, "client", d.Policy.Name)
	admitted += 300_000
	out := make([]core.Decision, 1)
	require.NoError(t, store.Peek(ctx, leaseT0.Add(2*time.Second), []core.Request{{Key: "api", Policy: l.Policies()[0], Cost: 1}}, out))
	held := p.Limit - out[0].Remaining - admitted
	assert.Less(t, held, int64(5_000), "the server holds %d units: shares follow the rate (1 a ms), not the dearest request", held)
}
