package chilimit_test

import (
	"testing"

	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// TestDerivedLimits: a reputation band's scaled policy never switches
// limiting off for the client it punishes, over real sockets, on memory
// and on Redis with two app servers (adapterstest.RunDerivedLimits).
func TestDerivedLimits(t *testing.T) { adapterstest.RunDerivedLimits(t, harness{}, redistest.Start(t)) }
