package httplimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

// TestReputationCountsTheAddress: with Config.Key reading an identity the
// request claims, what the flow sees (a 401, a 429) counts against the
// client address, and only reputation.Penalize, from the handler, against
// Config.Key's key (the address when it finds none).
func TestReputationCountsTheAddress(t *testing.T) {
	claimed := keyfuncs.Func(func(r keyfuncs.Request) (string, error) {
		if v := r.Header("X-User"); v != "" {
			return "user:" + v, nil
		}
		return "", keyfuncs.ErrNoKey
	})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // no decay
	rep, err := reputation.New(reputation.Config{Key: claimed, Bands: []reputation.Band{{Name: "abusive", Above: 100, Ban: true}},
		Now: func() time.Time { return now }})
	require.NoError(t, err)
	p := core.Policy{Name: "all", Algorithm: core.FixedWindow, Limit: 2, Window: time.Hour}
	f, err := httplimit.New(memStore(t), []httplimit.Layer{{Policy: p}}, httplimit.WithReputation(rep))
	require.NoError(t, err)
	serve := func(user string, next func(ctx context.Context) int) {
		r := newRequest()
		if user != "" {
			r.header.Set("X-User", user)
		}
		f.Serve(r, newResponse(), next)
	}
	scores := func() [2]float64 { return [2]float64{rep.Score("user:victim"), rep.Score("ip:192.0.2.1")} }
	serve("victim", func(ctx context.Context) int { reputation.Penalize(ctx, 2); return 401 })
	// The handler vouches for whom it reports; the 401 is the address's.
	assert.Equal(t, [2]float64{2, 1}, scores())
	serve("", func(ctx context.Context) int { reputation.Penalize(ctx, 2); return 200 })
	assert.Equal(t, [2]float64{2, 3}, scores(), "no key: the address")
	serve("victim", func(context.Context) int { return 200 }) // over the limit: 429
	assert.Equal(t, [2]float64{2, 4}, scores(), "a 429: the address")
	st := rep.Stats().Signals
	assert.Equal(t, []uint64{2, 1, 1}, []uint64{st[reputation.Reported], st[reputation.Refused], st[reputation.Denied]})
}
