package redisstore

import (
	"testing"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/storetest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// TestConformance runs the suite every core.Store passes.
func TestConformance(t *testing.T) {
	s, _, _ := newStore(t)
	storetest.Run(t, func(*testing.T) core.Store { return s })
}

// TestExactness models four app servers, each with its own connection pool
// to one Redis, hammering one key per algorithm from 16 goroutines each.
func TestExactness(t *testing.T) {
	srv := redistest.Start(t)
	prefix := testPrefix(t)
	stores := make([]core.Store, 4)
	for i := range stores {
		stores[i] = mustNew(t, srv.Client(), WithPrefix(prefix))
	}
	storetest.RunConcurrent(t, stores, 16)
}
