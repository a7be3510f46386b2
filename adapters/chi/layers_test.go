package chilimit_test

import (
	"testing"

	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/internal/redistest"
)

// TestLayers runs the layered limits suite (httplimit.WithLayers) over
// real sockets, on a memory store and on Redis.
func TestLayers(t *testing.T) { adapterstest.RunLayers(t, harness{}, redistest.Start(t)) }
