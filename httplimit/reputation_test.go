package httplimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/glue/hooks"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

// TestReputationCountsTheAddress: with Config.Key reading an identity the
// request claims, what the flow sees (a 401, a 429) counts against the
// client address, and only reputation.Report, from the handler, against
// Config.Key's key (the address when it finds none).
func TestReputationCountsTheAddress(t *testing.T) {
	claimed := keyfuncs.Func(func(r keyfuncs.Request) (string, error) {
		if v := r.Header("X-User"); v != "" {
			return "user:" + v, nil
		}
		return "", keyfuncs.ErrNoKey
	})
	rep, err := reputation.New(reputation.Config{Key: claimed, Bands: []reputation.Band{{Name: "abusive", Above: 100, Ban: true}}})
	require.NoError(t, err)
	type signal struct {
		key string
		s   reputation.Signal
	}
	var mu sync.Mutex
	var heard []signal
	hooks.ReputationTest(rep, nil, func(key string, s uint8, _ float64, _ string, _ bool) {
		mu.Lock()
		heard = append(heard, signal{key, reputation.Signal(s)})
		mu.Unlock()
	})
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
	serve("victim", func(ctx context.Context) int { reputation.Report(ctx, 2); return 401 })
	serve("", func(ctx context.Context) int { reputation.Report(ctx, 2); return 200 })
	serve("victim", func(context.Context) int { return 200 }) // over the limit: 429
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []signal{
		{"user:victim", reputation.Reported}, // the handler vouches for whom it reports
		{"ip:192.0.2.1", reputation.Refused},
		{"ip:192.0.2.1", reputation.Reported}, // no key: the address
		{"ip:192.0.2.1", reputation.Denied},
	}, heard)
}
