package clockstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/clockstore"
)

// recorder records the Requests it takes.
type recorder struct{ reqs []core.Request }

func (r *recorder) Take(_ context.Context, req core.Request) (core.Decision, error) {
	r.reqs = append(r.reqs, req)
	return core.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
}

func (*recorder) Reset(context.Context, string, core.Policy) error { return nil }

type direct struct{ *recorder }

func TestAtStampsZeroNowOnly(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	rec := &recorder{}
	s := clockstore.At(rec, t0)
	ctx := context.Background()
	_, err := s.Take(ctx, core.Request{Key: "a"})
	require.NoError(t, err)
	_, err = s.Take(ctx, core.Request{Key: "b", Now: t1})
	require.NoError(t, err)
	require.Len(t, rec.reqs, 2)
	assert.Equal(t, t0, rec.reqs[0].Now, "a zero Now is stamped")
	assert.Equal(t, t1, rec.reqs[1].Now, "an explicit Now is kept")
}

// TestAtCanBeAFallback: a wrapped memory-like store can still be a fallback.
func TestAtCanBeAFallback(t *testing.T) {
	_, err := core.NewLimiter(&recorder{}, core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Second},
		core.WithFallback(clockstore.At(direct{&recorder{}}, time.Time{})))
	require.NoError(t, err)
}
