package storetest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/core/storetest"
)

// newMemstore returns a fresh memstore, closed when t ends.
func newMemstore(t *testing.T) *memstore.Store {
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		assert.NoError(t, s.Close(), "memstore.Close")
	})
	return s
}

func TestRunMemstore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) core.Store { return newMemstore(t) })
}

// TestRunConcurrentMemstore races 64 goroutines on one memstore: separate
// memstores keep separate counts, so they are not one backend.
func TestRunConcurrentMemstore(t *testing.T) {
	storetest.RunConcurrent(t, []core.Store{newMemstore(t)}, 64)
}
