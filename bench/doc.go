// Package bench compares github.com/apigate/ratelimit with its Go peers,
// side by side in one run: the Redis stores (go-redis/redis_rate,
// ulule/limiter, throttled), the memory stores (x/time/rate behind a
// sync.Map, ulule/limiter, throttled) and the middleware (Echo's
// RateLimiter, Fiber's limiter, go-chi/httprate, ulule/limiter's Gin
// middleware, each in its own framework).
//
// The cases are Go benchmarks in this package's tests, in a module of its
// own so that the main module's go.mod gains no dependency:
//
//	go test -run '^$' -bench . -benchmem
//
// The command ./cmd/compare runs them and prints Markdown tables, with the
// machine they ran on; README.md says what each case measures.
package bench
