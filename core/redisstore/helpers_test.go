package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// testPrefix returns a key prefix of its own for the test, so that tests
// sharing a REDIS_URL server never meet.
func testPrefix(t testing.TB) string {
	name := strings.NewReplacer("/", ".", "{", "(", "}", ")", " ", "_").Replace(t.Name())
	return fmt.Sprintf("rltest:%s:%08x:", name, rand.Uint32())
}

// within returns s with every call bounded by d instead of s's timeout,
// for test Limiters that need a timeout of their own over a shared Store.
func within(s *Store, d time.Duration) timedStore { return timedStore{s, d} }

// alone returns s bounded as its decisions must be to take the path of
// the default timeout's: maxAlone, ten times that default, so that a
// healthy decision on a busy machine does not time out (a test that is
// not about timeouts must not see one), and no more, so that a lone
// decision still runs alone on its caller's goroutine (batcher.alone)
// instead of through the flushers, as a longer timeout would send it.
func alone(s *Store) timedStore { return within(s, maxAlone) }

// timedStore is a Store whose calls are bounded by d.
type timedStore struct {
	*Store
	d time.Duration
}

func (s timedStore) until(ctx context.Context) time.Time {
	deadline := time.Now().Add(s.d)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return deadline
}

func (s timedStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	return s.takeBy(ctx, now, reqs, out, s.until(ctx))
}

func (s timedStore) Peek(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	return s.peekBy(ctx, now, reqs, out, s.until(ctx))
}

func (s timedStore) Refund(ctx context.Context, at time.Time, reqs []core.Request) error {
	return s.refundBy(ctx, at, reqs, s.until(ctx))
}

func (s timedStore) Reset(ctx context.Context, key string, p core.Policy) error {
	return s.resetUntil(ctx, key, p, algo(p.Algorithm), s.until(ctx))
}

// Timeout is d.
func (s timedStore) Timeout() time.Duration { return s.d }

// mustNew returns New(client, opts...), failing t on an error, with
// limitertest.StoreTimeout unless opts set another timeout.
func mustNew(t testing.TB, client redis.UniversalClient, opts ...Option) *Store {
	t.Helper()
	s, err := New(client, append([]Option{WithTimeout(limitertest.StoreTimeout)}, opts...)...)
	require.NoError(t, err)
	return s
}

// withCheckTimeout bounds the check that New starts by d instead of
// configCheckTimeout: a test hook, which production code cannot write,
// since config's fields are unexported.
func withCheckTimeout(d time.Duration) Option {
	return func(c *config) error {
		c.checkTimeout = d
		return nil
	}
}

// withExplicitNowMinTTL sets the least TTL of keys written by requests with
// an explicit core.Request.Now, explicitNowMinTTL otherwise: a test that
// checks TTLs against its own clock sets 0. A test hook, like
// withCheckTimeout.
func withExplicitNowMinTTL(d time.Duration) Option {
	return func(c *config) error {
		c.explicitMinTTL = d
		return nil
	}
}

// stateKey returns the key holding the state of the client key under
// policy, or "" for an unknown algorithm.
func (s *Store) stateKey(key string, policy core.Policy) string {
	i := algo(policy.Algorithm)
	if i < 0 {
		return ""
	}
	return s.key(key, policy, i)
}

// newStore starts (or reaches) a Redis and returns a Store over a client of
// its own, with a prefix of its own.
func newStore(t testing.TB, opts ...Option) (*Store, *redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.Client()
	opts = append([]Option{WithPrefix(testPrefix(t))}, opts...)
	return mustNew(t, c, opts...), srv, c
}

// newMemStore returns a memstore with the default options, closed when t
// ends.
func newMemStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// policies returns one policy per algorithm, L per W.
func policies(l int64, w time.Duration) []core.Policy {
	ps := make([]core.Policy, len(limits.Algorithms[core.Algorithm]()))
	for i, a := range limits.Algorithms[core.Algorithm]() {
		ps[i] = core.Policy{Name: "p", Algorithm: a, Limit: l, Window: w}
	}
	return ps
}

// scanKeys returns every key starting with prefix.
func scanKeys(t testing.TB, ctx context.Context, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	var keys []string
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("scanKeys: unexpected client %T", c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// commandCounter is a go-redis hook that counts commands by name, and
// pipelines.
type commandCounter struct {
	mu        sync.Mutex
	names     map[string]int
	pipelines int
}

func newCommandCounter() *commandCounter { return &commandCounter{names: map[string]int{}} }

func (*commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.names[cmd.Name()]++
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.pipelines++
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// reset zeroes the counts.
func (h *commandCounter) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.names = map[string]int{}
	h.pipelines = 0
}

// snapshot returns the counts.
func (h *commandCounter) snapshot() (map[string]int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := make(map[string]int, len(h.names))
	for k, v := range h.names {
		m[k] = v
	}
	return m, h.pipelines
}

// take1 asks s about r alone, as takeN asks about several.
func take1(s core.Store, ctx context.Context, now time.Time, r core.Request) (core.Decision, time.Time, error) {
	reqs, out := [1]core.Request{r}, [1]core.Decision{}
	at, err := takeN(s, ctx, now, reqs[:], out[:])
	return out[0], at, err
}

// takeN asks s about reqs in the Store's own encoding (see check): costs
// of 0 are peeks, below 0 refunds of -Cost. A *Store is asked by its
// inner path, which these tests check; any other store (a memstore twin)
// by its Take, Peek or Refund, a refund's decisions being what that path
// says of them: Allowed, the policy's capacity as Limit.
func takeN(s core.Store, ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	var rs *Store
	var deadline time.Time
	switch s := s.(type) {
	case *Store:
		rs, deadline = s, s.deadline(ctx)
	case timedStore:
		rs, deadline = s.Store, s.until(ctx)
	}
	if rs != nil {
		var at int64
		var err error
		if len(reqs) == 1 && len(out) == 1 {
			out[0], at, err = rs.takeUntil(ctx, now, reqs[0], deadline)
		} else {
			at, err = rs.takeAllUntil(ctx, now, reqs, out, deadline)
		}
		if err != nil || at == 0 {
			return time.Time{}, err
		}
		return time.UnixMicro(at), nil
	}
	if len(reqs) == 0 || reqs[0].Cost > 0 {
		return s.Take(ctx, now, reqs, out)
	}
	own := slices.Clone(reqs)
	for i := range own {
		own[i].Cost = max(1, -own[i].Cost)
	}
	if reqs[0].Cost == 0 {
		return now, s.Peek(ctx, now, own, out)
	}
	if err := s.Refund(ctx, now, own); err != nil {
		return time.Time{}, err
	}
	for i := range out {
		p := &own[i].Policy
		out[i] = core.Decision{Allowed: true, Limit: limits.Capacity(p.Algorithm, p.Limit, p.Burst)}
	}
	return now, nil
}
