package reputation_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/internal/testkit/gridtest"
	// The generous store timeout of the module's tests (10 s): the grid
	// decides thousands of times through Redis, and none is about a
	// timeout.
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/reputation"
)

// bandScaler is a Tracker whose one band scales by f, from a score
// above 0.5: a client's first bad signal takes it in. Its clock stands
// still, so that the score never decays out of the band.
func bandScaler(t *testing.T, f float64) gridtest.Scaler {
	rep, err := reputation.New(reputation.Config{Bands: []reputation.Band{{Name: "suspicious", Above: 0.5, Scale: f}}, Now: func() time.Time { return t0 }})
	require.NoError(t, err)
	return gridtest.Scaler{Adjust: rep, Scale: func(t *testing.T, key string) {
		rep.Record(context.Background(), key, reputation.Denied)
		if f < 1 {
			p := core.Policy{Name: "x", Algorithm: core.FixedWindow, Limit: 1_000_000, Window: time.Minute}
			got, err := rep.Adjust(context.Background(), key, p)
			require.NoError(t, err)
			require.Less(t, got.Limit, p.Limit, "the client is in the band")
		}
	}}
}

// TestBandsNeverLooserOnMemstore: a band's scale, every factor of
// gridtest.Scales, on every algorithm and the extreme policies, over the
// memory store: no decision fails (none by the fail mode, which admits),
// and none admits more than the scaled policy allows. Before the scale
// went through the one clamp, 0.5 of the bucket (3 a day, burst
// 800) made a policy that takes 400 days to fill, and every request of
// the client in the band was admitted by the fail mode.
func TestBandsNeverLooserOnMemstore(t *testing.T) {
	store, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	gridtest.RunScales(t, gridtest.ScaleConfig{Store: store, NewScaler: bandScaler})
}

// TestBandsNeverLooserOnRedis is the grid over a real redis-server:
// every case but those whose usage Redis cannot drain
// (gridtest.Config.MaxDrain).
func TestBandsNeverLooserOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(srv.Client(), redisstore.WithPrefix("grid:"+t.Name()+":"), redisstore.WithTimeout(limitertest.StoreTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	gridtest.RunScales(t, gridtest.ScaleConfig{Store: store, NewScaler: bandScaler, MaxDrain: time.Duration(1<<53) * time.Microsecond})
}
