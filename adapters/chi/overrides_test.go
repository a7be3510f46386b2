package chilimit_test

import (
	"testing"

	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// TestOverrides runs the live-limits suite over real sockets: an override
// in process at the next request; through Redis, two app servers that
// deny past an operator's new limit within a second; one layer of a
// layered app overridden.
func TestOverrides(t *testing.T) { adapterstest.RunOverrides(t, harness{}, redistest.Start(t)) }
