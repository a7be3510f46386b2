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

// quietless gives a fake store the Peek and Refund that no test asks of it.
type quietless struct{}

var errQuiet = errors.New("fake store: no peeks, no refunds")

func (quietless) Peek(context.Context, time.Time, []core.Request, []core.Decision) error {
	return errQuiet
}
func (quietless) Refund(context.Context, time.Time, []core.Request) error { return errQuiet }
