package clockstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"errors"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
)

// recorder records the Requests it takes.
type recorder struct {
	reqs []core.Request
	nows []time.Time
}

func (r *recorder) Take(_ context.Context, now time.Time, req core.Request) (core.Decision, time.Time, error) {
	r.reqs = append(r.reqs, req)
	r.nows = append(r.nows, now)
	return core.Decision{Allowed: true, Limit: 10, Remaining: 9}, time.Time{}, nil
}

func (*recorder) Reset(context.Context, string, core.Policy) error { return nil }

type direct struct{ *recorder }

func TestAtStampsZeroNowOnly(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	rec := &recorder{}
	s := clockstore.At(rec, t0)
	ctx := context.Background()
	_, _, err := s.Take(ctx, time.Time{}, core.Request{Key: "a"})
	require.NoError(t, err)
	_, _, err = s.Take(ctx, t1, core.Request{Key: "b"})
	require.NoError(t, err)
	require.Len(t, rec.reqs, 2)
	assert.Equal(t, t0, rec.nows[0], "a zero now is stamped")
	assert.Equal(t, t1, rec.nows[1], "an explicit now is kept")
}

// TestAtCanBeAFallback: a wrapped memory-like store can still be a fallback.
func TestAtCanBeAFallback(t *testing.T) {
	_, err := core.NewLimiter(&recorder{}, []core.Policy{{Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}},
		core.WithFallback(clockstore.At(direct{&recorder{}}, time.Time{})))

	require.NoError(t, err)
}

// TakeAll fails: the fake decides one request at a time.
func (*recorder) TakeAll(context.Context, time.Time, []core.Request, []core.Decision) (time.Time, error) {
	return time.Time{}, errors.New("fake store: no layers")
}
