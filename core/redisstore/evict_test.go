package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// TestEvictionUnderAttack fills a Redis of 3 MB with an attacker rotating
// 40 000 client keys (a per-client limit of 100 per minute, the attacker
// never repeating a key), while a legitimate client keeps trying to log in
// under 5 per hour, through a fail-open Limiter, and another client comes
// once Redis is full.
//
// With maxmemory-policy volatile-ttl, Redis evicts the keys closest to
// expiry, the attacker's: both legitimate clients get real decisions, and
// exactly 5 admissions each. With noeviction, Redis fills up and refuses
// every admission with OOM, and the later client is let through past its
// limit: the test sees the hole it guards against.
func TestEvictionUnderAttack(t *testing.T) {
	for _, c := range []struct {
		policy string
		full   bool // Redis ends up full, refusing writes
	}{
		{"volatile-ttl", false},
		{"noeviction", true},
	} {
		t.Run(c.policy, func(t *testing.T) {
			srv := redistest.StartWith(t, "--maxmemory", "3mb", "--maxmemory-policy", c.policy)
			client := srv.Client()
			ctx := context.Background()
			s := mustNew(t, client, WithPrefix(testPrefix(t)), WithLogger(slog.New(slog.DiscardHandler)))
			attack := core.Policy{Name: "api", Algorithm: core.SlidingWindowCounter, Limit: 100, Window: time.Minute}
			// Not a sliding log: its script trims before it adds, and Redis
			// lets a script that has written once write on past maxmemory.
			login := core.Policy{Name: "login", Algorithm: core.SlidingWindowCounter, Limit: 5, Window: time.Hour}
			lim, err := core.NewLimiter(alone(s), []core.Policy{login})
			require.NoError(t, err)

			const keys, attackers, every = 40_000, 4, 100
			deadline := testwait.Deadline(20 * time.Second)
			var sent, oom atomic.Int64
			var stop atomic.Bool
			var mu sync.Mutex
			var failures []error // attacker errors other than OOM
			var wg sync.WaitGroup
			for a := range attackers {
				wg.Go(func() {
					for k := a; k < keys && !stop.Load() && time.Now().Before(deadline); k += attackers {
						_, _, err := take1(s, ctx, time.Time{}, core.Request{Key: "attacker-" + strconv.Itoa(k), Policy: attack, Cost: 1})
						sent.Add(1)
						switch {
						case err == nil:
						case strings.Contains(err.Error(), "OOM"):
							oom.Add(1)
						default:
							mu.Lock()
							failures = append(failures, err)
							mu.Unlock()
						}
					}
				})
			}
			attacking := make(chan struct{})
			go func() { wg.Wait(); close(attacking) }()

			// Alice tries to log in once every 100 attacker requests; Bob
			// comes once Redis is full (past 20 000 keys, or at the first
			// OOM) and tries 20 times, 100 attacker requests apart.
			type user struct {
				tries, admitted int
				errs            []error
			}
			var alice, bob user
			try := func(c *user, key string) {
				d, err := lim.AllowN(ctx, key, 1, time.Time{})
				require.NoError(t, err, "a decision is made, whatever Redis says")
				c.tries++
				if d.Err != nil {
					c.errs = append(c.errs, d.Err)
				}
				if d.Allowed {
					c.admitted++
				}
			}
		attack:
			for next := int64(0); ; next += every {
				for sent.Load() < next {
					select {
					case <-attacking:
						break attack
					case <-time.After(time.Millisecond):
					}
				}
				try(&alice, "alice")
				if bob.tries < 20 && (next >= keys/2 || oom.Load() > 0) {
					try(&bob, "bob")
				}
				if c.full && bob.tries == 20 {
					stop.Store(true) // enough shown
				}
			}
			require.Empty(t, failures, "attacker errors other than OOM")
			stats, err := client.Info(ctx, "stats").Result()
			require.NoError(t, err)
			evicted := infoInt(t, stats, "evicted_keys")
			t.Logf("%d attacker requests, %d OOM, %d evicted keys; alice: %d tries, %d admitted, %d errors; bob: %d, %d, %d",
				sent.Load(), oom.Load(), evicted, alice.tries, alice.admitted, len(alice.errs), bob.tries, bob.admitted, len(bob.errs))

			if !c.full {
				require.EqualValues(t, keys, sent.Load(), "the attack did not finish within its bound")
				assert.Positive(t, evicted, "the attack never filled Redis")
				assert.Zero(t, oom.Load(), "OOM errors")
				for _, c := range []user{alice, bob} {
					assert.Empty(t, c.errs, "the legitimate clients' errors")
					assert.Equal(t, login.Limit, int64(c.admitted), "admissions of a legitimate client")
				}
				assert.Greater(t, alice.tries, 4*int(login.Limit))
				return
			}
			// Redis refuses what writes (an admission), not what only reads
			// or deletes: Alice, at her limit, is still denied; Bob, who has
			// quota, mostly gets OOM, fails open, and is never counted.
			require.Positive(t, oom.Load(), "the attack never filled Redis")
			assert.Equal(t, login.Limit, int64(alice.admitted))
			require.NotEmpty(t, bob.errs)
			for _, err := range bob.errs {
				assert.True(t, errors.Is(err, limits.ErrStore) && strings.Contains(err.Error(), "OOM"), "%v", err)
			}
			assert.Greater(t, int64(bob.admitted), login.Limit, "a full Redis fails open: the limit no longer holds")
		})
	}
}

// infoInt returns the integer field name of an INFO reply.
func infoInt(t *testing.T, info, name string) int64 {
	t.Helper()
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, "%s", line)
			return n
		}
	}
	t.Fatalf("INFO has no %s", name)
	return 0
}
