package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// defaultPrefix starts every key the Store writes, unless WithPrefix says
// otherwise.
const defaultPrefix = "rl:"

// explicitNowMinTTL is the least TTL of a key written by a request with an
// explicit time (Take's now): such a time (a test's) may be far from Redis's
// own, and a TTL counted from it alone could expire the key at once.
const explicitNowMinTTL = time.Minute

var (
	//go:embed prelude.lua
	preludeLua string
	//go:embed fixed_window.lua
	fixedWindowLua string
	//go:embed sliding_window_log.lua
	slidingLogLua string
	//go:embed sliding_window_counter.lua
	slidingCounterLua string
	//go:embed token_bucket.lua
	tokenBucketLua string
	//go:embed leaky_bucket.lua
	leakyBucketLua string
	//go:embed lockout.lua
	lockoutLua string
)

// Option configures a Store. New applies the options in order and returns
// the error of the first that refuses its value; a nil Option is an error
// too. Every such error wraps core.ErrInvalidOption.
type Option func(*config) error

type config struct {
	prefix         string
	logger         *slog.Logger // nil: slog.Default() at the time of logging
	explicitMinTTL time.Duration
	checkTimeout   time.Duration
	busyPoll       time.Duration
	timeout        time.Duration
}

// defaultTimeout bounds every call of a Store built without WithTimeout.
const defaultTimeout = 100 * time.Millisecond

// WithTimeout bounds every call of the Store (Take, Peek, Refund, Reset): one
// that Redis has not answered after d fails with an error wrapping
// context.DeadlineExceeded, which a core.Limiter counts as a timeout,
// however the client is configured (go-redis, by default, does not honour
// context deadlines on socket reads). A caller's earlier deadline wins. d
// must be positive; the default is 100ms.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: redisstore.WithTimeout: %v is not positive", core.ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}

// deadline is the deadline of a call with ctx: the Store's timeout from
// now, or ctx's deadline if earlier.
func (s *Store) deadline(ctx context.Context) time.Time {
	deadline := time.Now().Add(s.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return deadline
}

// defaultBusyPoll is how long, by default, a lone decision's read spins
// before it parks (see WithBusyPoll): long enough for a loopback or LAN
// round trip on a loaded machine, which takes 40 to 150 µs. With 50 µs, on
// a 2-core VM whose loopback round trip took 45 to 110 µs, most polls ran
// out and a lone decision took half as long again, for more CPU.
const defaultBusyPoll = 200 * time.Microsecond

// maxBusyPoll bounds WithBusyPoll.
const maxBusyPoll = time.Millisecond

// WithBusyPoll sets how long a decision that runs alone (no other
// decision of the Store under way, over a *redis.Client) polls its socket
// for Redis's reply before it parks its goroutine; the default is 200 µs,
// and 0 turns polling off. d must be in [0, 1ms]. On loopback or a fast
// LAN, polling takes a quarter to a half off a lone decision's latency,
// for about the CPU that parking and waking would have cost, and at worst
// d of CPU a decision (see docs/redis.md). Only Linux polls, only on a
// machine with more than one CPU, and only over plain TCP and Unix
// sockets (not TLS).
func WithBusyPoll(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > maxBusyPoll {
			return fmt.Errorf("%w: redisstore.WithBusyPoll: %v is outside [0, %v]", core.ErrInvalidOption, d, maxBusyPoll)
		}
		c.busyPoll = d
		return nil
	}
}

// WithPrefix sets the prefix of every key the Store writes; the default is
// "rl:", and an empty prefix is allowed. Stores sharing one Redis
// with different prefixes share no state. A prefix with '{' or '}', which
// would take the place of the key's Redis Cluster hash tag (see the
// package documentation), or with an ASCII control byte, is an error.
func WithPrefix(p string) Option {
	return func(c *config) error {
		if i := strings.IndexFunc(p, func(r rune) bool { return r == '{' || r == '}' || r < 0x20 || r == 0x7f }); i >= 0 {
			return fmt.Errorf("%w: redisstore.WithPrefix: %q has %q at byte %d; braces and control bytes are not allowed",
				core.ErrInvalidOption, p, p[i], i)
		}
		c.prefix = p
		return nil
	}
}

// Store is a core.Store over Redis. It is safe for concurrent use; it holds
// no state of its own besides its configuration, so any number of Stores,
// in any number of processes, may share one Redis.
type Store struct {
	client    redis.UniversalClient
	config    // as the options left it
	scripts   [len(algos)]*redis.Script
	locked    [len(algos)]*redis.Script // the scripts wrapped in lockout.lua
	src       [len(algos)]string        // the sources of scripts
	lockedSrc [len(algos)]string        // and of locked
	recovery  *clusterRecovery          // nil unless client is a cluster client
	part      *partitioner              // likewise
	checked   chan struct{}             // closed once the check New starts is done
	batch     *batcher                  // nil unless client is a *redis.Client
	afterStep func()                    // tests only: called after each step of takeGroups
}

var (
	_ core.Store       = (*Store)(nil)
	_ core.Partitioned = (*Store)(nil)
)

// algos lists, per algorithm, the code that ends its keys and its script.
var algos = [...]struct {
	alg  core.Algorithm
	code string
	lua  *string
}{
	// fw2, swc2, tb2, lb2: the state packed in one string; "fw", "swc",
	// "tb" and "lb" held a HASH, which a server of an older version would
	// meet as WRONGTYPE in the string: new names, so that old and new
	// servers in a rolling deploy never read each other's keys (an upgrade
	// starts each client on a whole quota once). The old keys expire.
	{core.FixedWindow, "fw2", &fixedWindowLua},
	// swl2: the log of one member per request; "swl", one member per
	// unit, is another format, left to expire.
	{core.SlidingWindowLog, "swl2", &slidingLogLua},
	{core.SlidingWindowCounter, "swc2", &slidingCounterLua},
	// tb3: the bucket's level (units used) and last admission, as the
	// leaky bucket keeps them, so that a client moved to another plan
	// keeps its usage; "tb2" held the tokens left, in the same layout.
	{core.TokenBucket, "tb3", &tokenBucketLua},
	{core.LeakyBucket, "lb2", &leakyBucketLua},
}

// New returns a Store keeping its state in the Redis behind client: a
// *redis.Client, a *redis.ClusterClient or any other
// redis.UniversalClient. The Store does not own the client: closing it is
// the caller's business; Close closes what the Store opened itself.
//
// Over a *redis.Client, the first Store adds a hook to the client, which
// lets the client's other commands through untouched (see the package
// documentation); its lone decisions run over a client of the Store's own,
// of up to two connections. Over a cluster client, a failed decision asks
// the client to reload its slot map, so that the Store follows a promoted
// replica (see docs/redis.md).
//
// New does no I/O. It starts one goroutine that runs CheckConfig, for at
// most a few seconds, and logs a warning (WithLogger) if Redis has a
// maxmemory and the noeviction policy. It returns an error wrapping
// core.ErrInvalidOption, and starts nothing, if client is nil or an option
// is nil or refuses its value.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redisstore.New: nil client", core.ErrInvalidOption)
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: redisstore.New: nil %T", core.ErrInvalidOption, client)
	}
	c := config{prefix: defaultPrefix, explicitMinTTL: explicitNowMinTTL, checkTimeout: configCheckTimeout, busyPoll: defaultBusyPoll, timeout: defaultTimeout}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: redisstore.New: option %d is nil", core.ErrInvalidOption, i)
		}
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	s := &Store{client: client, config: c, recovery: newClusterRecovery(client), part: newPartitioner(client, c.timeout), checked: make(chan struct{})}
	if rc, ok := client.(*redis.Client); ok {
		s.batch = newBatcher(rc, c.busyPoll)
		// A Store dropped without Close closes its own connections.
		runtime.AddCleanup(s, func(d *redis.Client) { _ = d.Close() }, s.batch.direct)
	}
	for i, a := range algos {
		s.src[i], s.lockedSrc[i] = preludeLua+*a.lua, lockedScript(*a.lua)
		s.scripts[i] = redis.NewScript(s.src[i])
		s.locked[i] = redis.NewScript(s.lockedSrc[i])
	}
	go s.checkAtStart()
	return s, nil
}

// lockedScript returns the script of a policy with a core.Policy.Lockout whose
// algorithm's script is lua: the prelude, lua as the local function
// decide, and lockout.lua, which calls it.
func lockedScript(lua string) string {
	return preludeLua + "local function decide()\n" + lua + "\nend\n" + lockoutLua
}

// algo returns the index of a in algos, or -1.
func algo(a core.Algorithm) int {
	for i := range algos {
		if algos[i].alg == a {
			return i
		}
	}
	return -1
}

// key returns the key holding the state of the client key under policy,
// whose algorithm is algos[i], as described in the package documentation.
func (s *Store) key(key string, policy core.Policy, i int) string {
	name := policy.Name
	if name == "" {
		name = limits.DefaultName(policy.Algorithm, policy.Limit, policy.Window, policy.Burst)
	}
	return s.prefix + "{" + key + "}:" + name + ":" + algos[i].code
}

// Reset deletes the state of key under policy, and its lockout (see
// core.Policy.Lockout), with one DEL of both keys, which share a hash tag.
func (s *Store) Reset(ctx context.Context, key string, policy core.Policy) error {
	i := algo(policy.Algorithm)
	if i < 0 {
		return fmt.Errorf("%w: unknown algorithm %q", core.ErrInvalidOption, string(policy.Algorithm))
	}
	if key == "" {
		return fmt.Errorf("%w: empty key", core.ErrInvalidOption)
	}
	return s.resetUntil(ctx, key, policy, i, s.deadline(ctx))
}

// resetUntil is Reset of key under policy (of algorithm index i),
// returning by deadline.
func (s *Store) resetUntil(ctx context.Context, key string, policy core.Policy, i int, deadline time.Time) error {
	k := s.key(key, policy, i)
	err := s.bounded(ctx, deadline, func(sctx context.Context) error { return s.client.Del(sctx, k, lockKey(k)).Err() })
	if err != nil {
		s.recovery.failed(err)
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	return nil
}

// honoursDeadline reports whether the Store's client applies context
// deadlines to its socket reads and writes (go-redis's
// ContextTimeoutEnabled, on a *redis.Client or *redis.ClusterClient): a
// call then runs on the caller's goroutine with its deadline, sparing a
// goroutine, a channel and a few allocations.
func (s *Store) honoursDeadline() bool {
	switch c := s.client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// bounded runs call with a context of ctx's values and deadline (not its
// cancellation: a client that disconnects does not abort a call in
// flight), and returns by deadline or as soon as ctx ends, whichever comes
// first, however long the client would wait: on the caller's goroutine
// when the client honours deadlines, else on a goroutine of its own, which
// it stops waiting for (call's result is then dropped; call must write
// nothing the caller keeps using). It returns call's error, or the
// context's (context.DeadlineExceeded at the deadline) if it stopped
// waiting. It is the one place a Store waits on a goroutine.
func (s *Store) bounded(ctx context.Context, deadline time.Time, call func(context.Context) error) error {
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	if s.honoursDeadline() {
		defer cancel()
		err := call(sctx)
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	ch := make(chan error, 1)
	go func() {
		defer cancel()
		ch <- call(sctx)
	}()
	select {
	case err := <-ch:
		return err
	case <-sctx.Done():
		select {
		case err := <-ch: // it answered just in time
			return err
		default:
			return sctx.Err()
		}
	case <-ctx.Done():
		select {
		case err := <-ch:
			return err
		default:
			return ctx.Err()
		}
	}
}
