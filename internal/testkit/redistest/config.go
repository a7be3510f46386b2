package redistest

import (
	"slices"
	"testing"
)

// StartWith starts a redis-server of the test's own, configured by args,
// which follow the common arguments on its command line (for example
// "--maxmemory", "4mb", "--maxmemory-policy", "volatile-ttl"); Restart
// keeps them. Unlike Start, it never uses REDIS_URL: a test that
// configures its server, or resets its statistics, needs one of its own.
// It skips the test when redis-server is not installed, or fails it under
// CI=true.
func StartWith(tb testing.TB, args ...string) *Server {
	tb.Helper()
	args = slices.Clone(args)
	return startLocal(tb, lookPath(tb, "redis-server"), func(string) []string { return args }, nil)
}
