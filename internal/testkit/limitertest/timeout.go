package limitertest

import (
	"time"

	"github.com/apigate/ratelimit/internal/glue/hooks"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// StoreTimeout is the default timeout of every store a test builds
// without redisstore.WithTimeout, once this package is linked in: the
// stores bound their own calls, and 100ms is a production budget; on a
// busy CI machine a healthy Redis round trip can take longer, and a test
// that is not testing the timeout would then see a store failure (a
// fail-open 200 where it wants a 429). Tests that are about the timeout
// give their store a short one. It is a deadline, so testwait scales it.
var StoreTimeout = testwait.D(10 * time.Second)

func init() { hooks.DefaultStoreTimeout = StoreTimeout }
