package limitertest

import (
	"time"

	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// StoreTimeout is the timeout that tests give the Redis stores they build
// (redisstore.WithTimeout) unless they test the timeout: 100ms is a
// production budget, and on a busy CI machine a healthy Redis round trip
// can take longer, so that a test that is not about timeouts would see a
// store failure (a fail-open 200 where it wants a 429). It is a deadline,
// so testwait scales it.
var StoreTimeout = testwait.D(10 * time.Second)
