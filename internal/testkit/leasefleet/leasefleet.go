// Package leasefleet is what the lease fleet test (fleet_test.go) and its
// app server (./server) agree on: the four layers, the header that names
// a client, the banner and the counts the server keeps. The test runs
// eight servers over one Redis, then over a Redis Cluster, drives them
// above the global limit, and checks that the leased global layer holds
// its bound, that the per-client layers stay exact, and that the global
// layer costs few store round trips.
package leasefleet

import (
	"time"

	"github.com/apigate/ratelimit/core"
)

// The layers. Every window is Window long, aligned on multiples of it
// since the Unix epoch, as the stores align them; the limits differ, so
// that a 429's X-RateLimit-Limit names the layer that denied it.
const (
	Window = 5 * time.Second
	Lease  = 2 * time.Second

	GlobalLimit = 3000 // every request, one key: leased
	ClientLimit = 30   // every request, per API key
	SearchLimit = 25   // GET /api/search, per API key
	WritesLimit = 60   // POST, per API key
)

// Layer names, as the store and the RateLimit headers see them.
const (
	GlobalName = "global"
	ClientName = "client"
	SearchName = "search"
	WritesName = "writes"
)

// KeyHeader carries the client's API key; the load generator sets it.
const KeyHeader = "X-Api-Key"

// Paths the server serves: the limited API under APIPrefix (SearchPath
// under the search layer, POST under the writes layer), and its counts,
// not limited, at CountsPath.
const (
	APIPrefix  = "/api/"
	ItemsPath  = "/api/items"
	SearchPath = "/api/search"
	CountsPath = "/debug/fleet"
)

// ListeningPrefix starts the banner line that gives the server's URL.
const ListeningPrefix = "listening on "

// FailClosed is every layer's: a store that fails (a machine so busy
// that Redis answers late) denies with 503, so that every admission the
// test counts was decided by the store or a lease.
const FailClosed = time.Second

// Policies returns the layers' policies: global, client, search, writes.
func Policies() []core.Policy {
	return []core.Policy{
		{Name: GlobalName, Algorithm: core.FixedWindow, Limit: GlobalLimit, Window: Window, Lease: Lease, FailClosed: FailClosed},
		{Name: ClientName, Algorithm: core.FixedWindow, Limit: ClientLimit, Window: Window, FailClosed: FailClosed},
		{Name: SearchName, Algorithm: core.FixedWindow, Limit: SearchLimit, Window: Window, FailClosed: FailClosed},
		{Name: WritesName, Algorithm: core.SlidingWindowCounter, Limit: WritesLimit, Window: Window, FailClosed: FailClosed},
	}
}

// WindowOf returns the start, in Unix seconds, of the window t is in.
func WindowOf(t time.Time) int64 {
	w := Window.Microseconds()
	us := t.UnixMicro()
	return (us - us%w) / int64(time.Second/time.Microsecond)
}

// Counts is what a server has counted since it started, as it serves it
// at CountsPath (JSON).
type Counts struct {
	// Requests is the requests to the API, decided or not.
	Requests int64
	// Admitted counts the admitted requests by the window (WindowOf) they
	// were decided in: the server arrived and the handler ran in it, the
	// decision being between. Straddled counts, by the earlier window,
	// those that arrived in one window and reached the handler in the
	// next: decided in one of the two.
	Admitted, Straddled map[int64]int64
	// Denied is the requests answered 429; Failed those answered 503
	// (the store failed: see FailClosed).
	Denied, Failed int64
	// LeaseDecisions is the requests the global layer decided in process
	// (core.SourceLease), admitted or denied.
	LeaseDecisions int64
	// GlobalTakes and GlobalRefunds are the store calls (round trips)
	// whose requests include the global layer's key; GlobalTakeUnits the
	// units those Takes asked of it; GlobalRenewals the Takes of the
	// global key alone (a lease's renewals: the others are requests that
	// no lease decided).
	GlobalTakes, GlobalRefunds, GlobalTakeUnits, GlobalRenewals int64
	// Takes and Refunds are all the store calls.
	Takes, Refunds int64
}
