package httplimit

import (
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
)

// PerIP returns the Flow of one layer over store: limit requests per window
// for each client IP (the socket peer, as a layer without a Key), by the
// default algorithm, core.SlidingWindowCounter, with New's defaults.
//
// It is New for the common case, meant for constant arguments, and panics
// on invalid ones (limit out of [1, 10^12], window out of [1 ms, 366 days],
// a nil store), as regexp.MustCompile does; New returns the error instead.
func PerIP(store core.Store, limit int64, window time.Duration) *Flow {
	f, err := New(store, []Layer{{Policy: core.Policy{Limit: limit, Window: window}}})
	if err != nil {
		panic(fmt.Errorf("httplimit.PerIP(%d, %v): %w", limit, window, err))
	}
	return f
}
