package limitertest

import (
	"time"

	"github.com/apigate/ratelimit/core"
)

// StoreTimeout is the timeout of every test Limiter that is not about
// timeouts. core.DefaultTimeout (100ms) is a production budget; on a busy
// CI machine a healthy Redis round trip, or the first run of the goroutine
// a CallBounded store is called on, can take longer, and a test that is not
// testing the timeout would then see a store failure (a fail-open 200
// where it wants a 429). Tests that are about the timeout set their own,
// short one, and keep their healthy steps on a Limiter with a generous one.
//
// A store may choose how to decide by the deadline it is given: redisstore
// decides a lone request due within a second on its caller's goroutine, and
// sends any other through its batch. Tests of that path (redisstore's own,
// core/storetest's scripts through a Limiter) use a second instead.
const StoreTimeout = 10 * time.Second

// Generous returns core.WithTimeout(StoreTimeout), for the option lists of
// test Limiters: put first, it leaves any later WithTimeout the last word.
func Generous() core.Option { return core.WithTimeout(StoreTimeout) }
