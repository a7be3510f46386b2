package memstore_test

import (
	"testing"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/storetest"
)

func TestConformance(t *testing.T) {
	s := newStore(t)
	storetest.Run(t, func(*testing.T) core.Store { return s })
}

func TestExactness(t *testing.T) {
	s := newStore(t)
	storetest.RunConcurrent(t, []core.Store{s}, 64)
}
