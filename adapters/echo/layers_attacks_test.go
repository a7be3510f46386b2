package echolimit_test

import (
	"testing"

	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// TestLayersAttacks runs the hostile-client attacks on layered limits
// over real sockets (adapterstest.RunLayersAttacks).
func TestLayersAttacks(t *testing.T) { adapterstest.RunLayersAttacks(t, harness{}, redistest.Start(t)) }
