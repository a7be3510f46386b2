package chilimit_test

import (
	"testing"

	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
)

// TestLayersOutage: layers over a frozen, then dead, Redis, over real
// sockets: the login layer fails closed, the rest open.
func TestLayersOutage(t *testing.T) { adapterstest.RunLayersOutage(t, harness{}) }

// TestOutageLog: a frozen Redis under a Flow that logs with LogErrors,
// over real sockets: a bounded number of Warn lines naming the store's
// error, none calling a request canceled, one Info line at the end; a
// client that leaves is still canceled. One framework suffices: the log
// is httplimit's, whatever the adapter.
func TestOutageLog(t *testing.T) { adapterstest.RunOutageLog(t, harness{}) }
