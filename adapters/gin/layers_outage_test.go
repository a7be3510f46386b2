package ginlimit_test

import (
	"testing"

	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
)

// TestLayersOutage: layers over a frozen, then dead, Redis, over real
// sockets: the login layer fails closed, the rest open.
func TestLayersOutage(t *testing.T) { adapterstest.RunLayersOutage(t, harness{}) }
