package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

// newMemStore returns a memstore with the default options, closed when t
// ends.
func newMemStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// sourceFunc is a function that is a core.PolicySource: the tests'
// sources, most of them closures.
type sourceFunc func(ctx context.Context, key string, p core.Policy) (core.Policy, error)

// Adjust returns f(ctx, key, p).
func (f sourceFunc) Adjust(ctx context.Context, key string, p core.Policy) (core.Policy, error) {
	return f(ctx, key, p)
}

// quietless gives a fake store the Peek and Refund that no test asks of it.
type quietless struct{}

var errQuiet = errors.New("fake store: no peeks, no refunds")

func (quietless) Peek(context.Context, time.Time, []core.Request, []core.Decision) error {
	return errQuiet
}
func (quietless) Refund(context.Context, time.Time, []core.Request) error { return errQuiet }

// takeOne is the Store.Take of a fake store that decides one request at a
// time by decide: it has no layers.
func takeOne(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision,
	decide func(context.Context, time.Time, core.Request) (core.Decision, time.Time, error)) (time.Time, error) {
	if len(reqs) != 1 {
		return time.Time{}, errors.New("fake store: no layers")
	}
	var at time.Time
	var err error
	out[0], at, err = decide(ctx, now, reqs[0])
	return at, err
}
