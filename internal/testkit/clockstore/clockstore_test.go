package clockstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
)

// recorder records the Requests it is asked about, and the times.
type recorder struct {
	reqs []core.Request
	nows []time.Time
}

func (r *recorder) Take(_ context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	return time.Time{}, r.Peek(context.Background(), now, reqs, out)
}

func (r *recorder) Peek(_ context.Context, now time.Time, reqs []core.Request, out []core.Decision) error {
	r.reqs = append(r.reqs, reqs...)
	r.nows = append(r.nows, now)
	for i := range out {
		out[i] = core.Decision{Allowed: true, Limit: 10, Remaining: 9}
	}
	return nil
}

func (r *recorder) Refund(_ context.Context, at time.Time, reqs []core.Request) error {
	r.reqs = append(r.reqs, reqs...)
	r.nows = append(r.nows, at)
	return nil
}

func (*recorder) Reset(context.Context, string, core.Policy) error { return nil }

type direct struct{ *recorder }

func TestAtStampsZeroNowOnly(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	rec := &recorder{}
	s := clockstore.At(rec, t0)
	ctx := context.Background()
	out := make([]core.Decision, 1)
	_, err := s.Take(ctx, time.Time{}, []core.Request{{Key: "a"}}, out)
	require.NoError(t, err)
	_, err = s.Take(ctx, t1, []core.Request{{Key: "b"}}, out)
	require.NoError(t, err)
	require.NoError(t, s.Peek(ctx, time.Time{}, []core.Request{{Key: "c"}}, out))
	require.NoError(t, s.Refund(ctx, t1, []core.Request{{Key: "d"}}))
	require.Len(t, rec.reqs, 4)
	assert.Equal(t, t0, rec.nows[0], "a zero now is stamped")
	assert.Equal(t, t1, rec.nows[1], "an explicit now is kept")
	assert.Equal(t, t0, rec.nows[2], "a peek's zero now is stamped")
	assert.Equal(t, t1, rec.nows[3], "a refund's time is kept")
}

// TestAtCanBeAFallback: a wrapped memory-like store can still be a fallback.
func TestAtCanBeAFallback(t *testing.T) {
	_, err := core.NewLimiter(&recorder{}, []core.Policy{{Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}},
		core.WithFallback(clockstore.At(direct{&recorder{}}, time.Time{})))

	require.NoError(t, err)
}
