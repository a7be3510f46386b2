package fiberlimit_test

import (
	"testing"

	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
)

// TestDoors checks, over real sockets, what a ban, a claimed identity and
// a shared layer may not open: the quota endpoint and the reputation
// (adapterstest.RunDoors).
func TestDoors(t *testing.T) { adapterstest.RunDoors(t, harness{}) }
