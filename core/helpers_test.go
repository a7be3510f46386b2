package core_test

import (
	"testing"

	"github.com/stretchr/testify/require"

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
