package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// TestAbandonedDecisionCounts freezes Redis under a decision: the Limiter
// gives up at its timeout and applies its FailMode, but the script, once
// sent, cannot be recalled, and Redis runs it when it thaws. Its unit is
// then spent: a request denied under FailClosed has used quota, and the
// next request sees it. Clients are never admitted more than L; the error
// is on the safe side of the limit.
func TestAbandonedDecisionCounts(t *testing.T) {
	for _, kind := range clientKinds {
		for _, mode := range []time.Duration{time.Second, 0} { // the policy's FailClosed
			t.Run(kind.name+"/"+failName(mode), func(t *testing.T) {
				srv := redistest.StartWith(t) // of its own: it freezes it
				opts := srv.Options()
				opts.ContextTimeoutEnabled = kind.contextDeadline
				client := redis.NewClient(opts)
				t.Cleanup(func() { _ = client.Close() })
				s := mustNew(t, client, WithPrefix(testPrefix(t)), WithLogger(slog.New(slog.DiscardHandler)))
				waitChecked(t, s, 10*time.Second)
				p := core.Policy{Name: "abandon", Algorithm: core.SlidingWindowLog, Limit: 3, Window: time.Hour, FailClosed: mode}
				lim, err := core.NewLimiter(within(s, 100*time.Millisecond), []core.Policy{p})
				require.NoError(t, err)
				// The healthy decisions, before and after the freeze, go
				// through a Limiter of their own, over the same store and
				// policy, with a generous timeout (aloneTimeout): a
				// healthy round trip on a busy machine may outlast the
				// short one under test.
				healthy, err := core.NewLimiter(alone(s), []core.Policy{p})
				require.NoError(t, err)
				ctx := context.Background()
				admitted := 0
				for range 2 {
					d, err := healthy.AllowN(ctx, "k", 1, time.Time{})
					require.NoError(t, err)
					require.True(t, d.Allowed)
					admitted++
				}

				srv.Freeze()
				d, err := lim.AllowN(ctx, "k", 1, time.Time{})
				require.NoError(t, err)
				require.ErrorIs(t, d.Err, limits.ErrStore)
				require.Equal(t, mode == 0, d.Allowed, "%+v", d)
				if d.Allowed {
					admitted++
				}
				srv.Thaw()

				// Redis runs the abandoned script: the log's running count
				// reaches 3.
				key := s.stateKey("k", p)
				units := func() int64 {
					z, err := srv.Client().ZRange(ctx, key, -1, -1).Result()
					if err != nil || len(z) != 1 {
						return -1
					}
					_, to, _ := cutMember(z[0])
					return to
				}
				require.Eventually(t, func() bool { return units() == 3 }, testwait.D(5*time.Second), 5*time.Millisecond,
					"the abandoned decision never reached the log")
				for range 3 {
					d, err := healthy.AllowN(ctx, "k", 1, time.Time{})
					require.NoError(t, err)
					assert.False(t, d.Allowed, "%+v", d)
				}
				assert.LessOrEqual(t, admitted, int(p.Limit))
				assert.EqualValues(t, 3, units())
			})
		}
	}
}

// cutMember parses a sliding-log member, "<from>:<to>".
func cutMember(m string) (from, to int64, err error) {
	a, b, ok := strings.Cut(m, ":")
	if !ok {
		return 0, 0, fmt.Errorf("member %q: no colon", m)
	}
	if from, err = strconv.ParseInt(a, 10, 64); err == nil {
		to, err = strconv.ParseInt(b, 10, 64)
	}
	return from, to, err
}
