package overrides_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/internal/testkit/gridtest"
	// The generous store timeout of the module's tests (10 s): the grid
	// decides thousands of times through Redis, and none is about a
	// timeout.
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
	"github.com/apigate/ratelimit/overrides"
)

// setSource is a fresh Set for one case of the grid, logging to a buffer
// of its own.
func setSource(t *testing.T) gridtest.Source {
	set := overrides.New()
	logs := new(syncbuf.Buffer)
	set.SetLogger(slog.New(slog.NewTextHandler(logs, nil)))
	return gridtest.Source{Adjust: set, Put: set.Put, Logs: logs.String}
}

// TestGridNeverLooserOnMemstore: every override of the grid, with and
// without a load factor, on every algorithm, over the memory store: no
// decision fails, and none admits more than the tighter policy allows
// (see package gridtest).
func TestGridNeverLooserOnMemstore(t *testing.T) {
	gridtest.Run(t, gridtest.Config{Store: newStore(t), NewSource: setSource, Loads: []float64{1, 0.5, 0.001}})
}

// TestGridNeverLooserOnRedis is the grid over a real redis-server: the
// issue's policy whole, and one case in 5 of the others (5 is prime to
// the 2 variants and 3 loads, so that each is run), the memory store
// running them all.
func TestGridNeverLooserOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redisstore.New(srv.Client(), redisstore.WithPrefix("grid:"+t.Name()+":"), redisstore.WithTimeout(limitertest.StoreTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	var _ core.Store = store
	gridtest.Run(t, gridtest.Config{Store: store, NewSource: setSource, Loads: []float64{1, 0.5, 0.001}, MaxDrain: redisMaxDrain, Every: 5})
}

// redisMaxDrain is 2^53 microseconds, about 285 years: past it the Redis
// store's bucket scripts do not return (see gridtest.Config.MaxDrain).
const redisMaxDrain = time.Duration(1<<53) * time.Microsecond

// loadScaler is a Load whose MinScale is f, read down to it (one Step)
// when the case scales.
func loadScaler(t *testing.T, f float64) gridtest.Scaler {
	load, err := overrides.NewLoad(func() float64 { return 1 }, overrides.LoadConfig{High: 0.5, Low: 0.1, Step: 1, MinScale: f})
	require.NoError(t, err)
	t.Cleanup(func() { _ = load.Close() })
	return gridtest.Scaler{Adjust: load, Scale: func(t *testing.T, _ string) { require.InDelta(t, f, load.Update(), 1e-12) }}
}

// TestLoadNeverLooserOnMemstore: the load signal's scale, every factor
// of gridtest.Scales, through the same derivation as a band's
// (limits.Derive): no decision fails, none admits more than the scaled
// policy allows.
func TestLoadNeverLooserOnMemstore(t *testing.T) {
	gridtest.RunScales(t, gridtest.ScaleConfig{Store: newStore(t), NewScaler: loadScaler})
}
