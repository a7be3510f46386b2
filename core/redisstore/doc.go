// Package redisstore is the Redis implementation of core.Store: every
// decision is one Lua script, run atomically by Redis in one round trip, so
// that any number of app servers sharing one Redis (or one Redis Cluster)
// admit exactly what one process would.
//
// # Scripts
//
// Each algorithm is one script, in its own .lua file embedded in the
// binary, whose header states its state and reply; prelude.lua, sent in
// front of each, reads the arguments and holds the shared helpers. The
// arithmetic is core/memstore's, operation for operation, so both stores
// give the same Decision for the same history; core/storetest holds both
// to it. A script's work does not grow with the request's cost: the
// sliding log writes one member per request. Scripts run with EVALSHA and
// fall back to EVAL when Redis answers NOSCRIPT.
//
// # Keys
//
// The state of a client key under a policy lives at
//
//	<prefix>{<client key>}:<policy name>:<algorithm code>
//
// with the prefix "rl:" by default (WithPrefix) and the codes fw, swl2,
// swc, tb and lb (swl2 replaced swl, whose keys held one member per unit;
// they are never read, and expire within their window). The braces are a
// Redis Cluster hash tag, so a script never spans slots. The Limiter hands
// the store keys without braces (core.NormalizeKey); a prefix should not
// contain any either, or every key would share one slot.
//
// # Time and TTLs
//
// A Request with a zero Now is decided at Redis TIME, one clock for every
// app server; an explicit Now (core.WithClock, for tests) is passed in
// microseconds, and its keys live at least WithExplicitNowMinTTL. A request
// dated before the key's last admission is decided at that admission. Every
// key written gets a TTL no longer than its state matters; denied requests
// write nothing, except that the log drops members that have left the
// window.
//
// # Timeouts
//
// A core.Limiter bounds every decision with its timeout (core.WithTimeout)
// and applies its FailMode when Redis is late. A script already sent
// cannot be recalled, and Redis may run it after the Limiter gave up: a
// request denied under FailClosed may then have spent its quota. That
// errs on the side of the limit, never past it; a refund would admit more
// than L whenever the script had not run. Keep the timeout above Redis's
// p99: since no script grows with the cost, a timeout means an overloaded
// or unreachable Redis. Build the client with ContextTimeoutEnabled: true
// (the Limiter's deadline then reaches the socket), a ReadTimeout and
// WriteTimeout of 100 to 500 ms, and a PoolSize for the decisions in
// flight.
//
// # Memory
//
// Run Redis with maxmemory-policy volatile-ttl (or an allkeys-* policy):
// under noeviction a full Redis refuses admissions with OOM, and the
// FailMode decides for every client. New checks this once in the
// background and logs a warning (WithLogger); CheckConfig returns
// ErrNoEviction, for readiness probes. The README says more on both.
package redisstore
