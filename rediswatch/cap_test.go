package rediswatch_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/rediswatch"
)

// capHeld is how many bans TestBansAtCap holds: just under the default
// WithMax of 100,000.
const capHeld = 99_900

// timeoutConn counts the reads of a connection that time out: every one,
// those go-redis then retries included.
type timeoutConn struct {
	net.Conn
	n *atomic.Int64
}

func (c timeoutConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.n.Add(1)
	}
	return n, err
}

// docsClient returns a client with the read and write timeouts
// docs/redis.md recommends (200 ms, ContextTimeoutEnabled), whose
// timed-out reads are counted in n.
func docsClient(t *testing.T, srv *redistest.Server, n *atomic.Int64) *redis.Client {
	o := srv.Options()
	o.ContextTimeoutEnabled = true
	// The docs' 200 ms, scaled as deadlines are: a busy machine
	// deschedules Redis for longer than any page takes.
	o.ReadTimeout = testwait.D(200 * time.Millisecond)
	o.WriteTimeout = testwait.D(200 * time.Millisecond)
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := new(net.Dialer).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return timeoutConn{Conn: c, n: n}, nil
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// seedAtCap writes capHeld permanent bans and a marker straight into
// Redis, under the default key, in pipelines.
func seedAtCap(t *testing.T, raw *redis.Client) {
	t.Helper()
	ctx := context.Background()
	fill(t, raw, rediswatch.DefaultPrefix, capHeld)
	tag := "{" + rediswatch.DefaultPrefix + "}:"
	require.NoError(t, raw.HSet(ctx, tag+"m", "e", "1", "r", "1").Err())
	require.NoError(t, raw.Set(ctx, tag+"v", "1", 0).Err())
}

// failedOpen runs a Limiter on a redisstore over srv until stop is
// closed, and returns how many decisions it made and how many failed
// open (Redis did not answer within the Limiter's 100 ms).
func failedOpen(t *testing.T, srv *redistest.Server, stop <-chan struct{}) func() (all, open int) {
	store, err := redisstore.New(docsClient(t, srv, new(atomic.Int64)), redisstore.WithPrefix("cap:"), redisstore.WithTimeout(limitertest.StoreTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	lim, err := core.NewLimiter(store, []core.Policy{{Name: "api", Algorithm: core.TokenBucket, Limit: 1_000_000, Window: time.Second}})
	require.NoError(t, err)
	var all, open atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		pace := time.NewTicker(time.Millisecond) // a server's traffic, not a spin
		defer pace.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-pace.C:
			}
			d, err := lim.AllowN(context.Background(), "client:"+strconv.Itoa(i%100), 1, time.Time{})
			if err != nil {
				continue
			}
			all.Add(1)
			if d.Source == core.SourceFailMode {
				open.Add(1)
			}
		}
	}()
	return func() (int, int) {
		testwait.Done(t, done, 5*time.Second, "the limiter's loop ends")
		return int(all.Load()), int(open.Load())
	}
}

// TestBansAtCap holds just under the default cap of bans, with the
// client timeouts docs/redis.md recommends: three servers start at once,
// Redis loses its data, a ban is made on one server after each; every
// call succeeds without a read timing out, every ban comes back, and each
// ban reaches the other servers within a second. A Limiter sharing the
// Redis keeps deciding meanwhile.
func TestBansAtCap(t *testing.T) {
	srv := redistest.StartWith(t) // of its own: it is flushed
	raw := srv.Client()
	ctx := context.Background()
	seedAtCap(t, raw)

	var timeouts atomic.Int64
	servers := make([]*rediswatch.Bans, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, testwait.D(20*time.Second))
			defer cancel()
			servers[i], errs[i] = rediswatch.NewBans(ctx, docsClient(t, srv, &timeouts), quiet)
		}()
	}
	wg.Wait()
	for i, b := range servers {
		require.NoError(t, errs[i], "server %d starts", i)
		t.Cleanup(func() { _ = b.Close() })
		require.Equal(t, capHeld, rediswatch.Len(b), "server %d holds every ban", i)
	}
	assert.Zero(t, timeouts.Load(), "reads timed out while three servers started at once")
	reaches(t, servers[0], servers[1:], access.Entry{Key: "after:start"})

	// Redis loses its data while a Limiter decides on it; the first Ban
	// after the loss is made on another server than the poller's.
	stop := make(chan struct{})
	counts := failedOpen(t, srv, stop)
	// ASYNC: a FLUSHDB of 200,000 keys would itself hold Redis longer
	// than the timeouts, as a restart does not.
	require.NoError(t, raw.FlushDBAsync(ctx).Err())
	start := time.Now()
	reaches(t, servers[1], []*rediswatch.Bans{servers[0], servers[2]}, access.Entry{Key: "after:loss"})
	testwait.For(t, 10*time.Second, tick, func() bool {
		n, err := raw.ZCard(ctx, "{"+rediswatch.DefaultPrefix+"}:i").Result()
		return err == nil && n == capHeld+2
	}, "every ban back in Redis")
	recovery := time.Since(start)
	close(stop)
	all, open := counts()
	t.Logf("recovery: %v; the limiter decided %d times meanwhile, %d (%.1f%%) failed open", recovery, all, open, 100*float64(open)/float64(max(all, 1)))
	for i, b := range servers {
		require.Equal(t, capHeld+2, rediswatch.Len(b), "server %d holds every ban", i)
	}
	assert.Zero(t, timeouts.Load(), "reads timed out while Redis got its bans back")
}

// reaches bans e on from, within the test's own deadline, and checks
// that the others have it in force within a second of its acceptance.
func reaches(t *testing.T, from *rediswatch.Bans, others []*rediswatch.Bans, e access.Entry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(10*time.Second))
	defer cancel()
	_, err := from.Ban(ctx, e, 0)
	require.NoError(t, err, "ban %v", e)
	accepted := time.Now()
	testwait.For(t, time.Second, tick, func() bool {
		for _, o := range others {
			if !has(o, e) {
				return false
			}
		}
		return true
	}, "ban %v on every other server within a second of its acceptance", e)
	t.Logf("ban %v on every other server %v after its acceptance (checked every %v)", e, time.Since(accepted).Round(time.Millisecond), tick)
}

// TestLoadPagesMissNothing changes the bans between the pages of a load
// (Redis holds 20,000, about ten pages): a ban made, one replaced, one
// lifted after its page was read and one lifted before, each from
// another server. The load's snapshot is Redis's at its end, every ban
// untouched included, without a poll to catch up.
func TestLoadPagesMissNothing(t *testing.T) {
	srv := redistest.StartWith(t)
	raw := srv.Client()
	ctx := context.Background()
	const held = 20_000
	fill(t, raw, rediswatch.DefaultPrefix, held)
	other, _ := open(t, raw, manual)
	var pages atomic.Int64
	first, last := benchEntry(0), benchEntry(held-1)
	hook := func() {
		if pages.Add(1) != 3 {
			return
		}
		_, err := other.Ban(ctx, access.Entry{Key: "made:during"}, 0)
		assert.NoError(t, err)
		_, err = other.Ban(ctx, access.Entry{Key: "user:1", Reason: "replaced"}, 0)
		assert.NoError(t, err)
		for _, e := range []access.Entry{first, last} {
			_, err := other.Unban(ctx, e)
			assert.NoError(t, err)
		}
	}
	b, _ := open(t, raw, manual, rediswatch.WithPageHook(hook))
	require.Greater(t, pages.Load(), int64(5), "the load went in pages")
	assert.Equal(t, held-2+1, rediswatch.Len(b))
	assert.True(t, has(b, access.Entry{Key: "made:during"}))
	e, ok := b.Match(netip.Addr{}, "user:1", time.Now())
	assert.True(t, ok)
	assert.Equal(t, "replaced", e.Reason)
	assert.False(t, has(b, first))
	assert.False(t, has(b, last))
	for i := 1; i < held-1; i++ {
		if !has(b, benchEntry(i)) {
			t.Fatalf("ban %d, untouched, is missing", i)
		}
	}
}
