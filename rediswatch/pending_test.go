package rediswatch_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/rediswatch"
)

// TestChangesDuringReload holds a server's reload between its pages
// (Redis holds 20,000 bans, about ten pages) while another server bans a
// key and lifts a ban, as a resync does and after Redis lost its data
// (written back by the other server): both changes are in force on the
// reloading server from its next page, before the reload ends, and still
// after it; a ban made before the reload, which the reloading server had
// not read, is in force from its first page (fails without applyPending).
func TestChangesDuringReload(t *testing.T) {
	for _, loss := range []bool{false, true} {
		name := "resync"
		if loss {
			name = "after a loss"
		}
		t.Run(name, func(t *testing.T) {
			srv := redistest.StartWith(t)
			raw := srv.Client()
			ctx := context.Background()
			const held = 20_000
			fill(t, raw, rediswatch.DefaultPrefix, held)
			other, _ := open(t, raw, manual)
			early, made, lifted := access.Entry{Key: "made:before"}, access.Entry{Key: "made:during"}, benchEntry(5)
			var b *rediswatch.Bans
			var armed atomic.Bool
			var pages atomic.Int64
			var earlySeen, madeSeen, liftSeen atomic.Bool
			hook := func() {
				if !armed.Load() {
					return
				}
				switch pages.Add(1) {
				case 1:
					earlySeen.Store(has(b, early))
				case 2:
					_, err := other.Ban(ctx, made, 0)
					assert.NoError(t, err)
					_, err = other.Unban(ctx, lifted)
					assert.NoError(t, err)
				case 3:
					madeSeen.Store(has(b, made))
					liftSeen.Store(!has(b, lifted))
				}
			}
			b, _ = open(t, raw, manual, rediswatch.WithPageHook(hook))
			require.True(t, has(b, lifted))
			if loss {
				require.NoError(t, raw.FlushDB(ctx).Err())
				require.NoError(t, rediswatch.WriteBack(ctx, other))
			}
			_, err := other.Ban(ctx, early, 0)
			require.NoError(t, err)
			armed.Store(true)
			require.NoError(t, rediswatch.Reload(ctx, b))
			require.Greater(t, pages.Load(), int64(3), "the reload went on after the third page")
			assert.True(t, earlySeen.Load(), "the ban made before the reload in force from its first page")
			assert.True(t, madeSeen.Load(), "the ban made during the reload in force before it ended")
			assert.True(t, liftSeen.Load(), "the ban lifted during the reload lifted before it ended")
			assert.True(t, has(b, made))
			assert.True(t, has(b, early))
			assert.False(t, has(b, lifted))
			assert.Equal(t, held+1, rediswatch.Len(b))
		})
	}
}
