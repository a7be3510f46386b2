// Package redisstore is the Redis implementation of core.Store: every
// decision is one Lua script, run atomically by Redis in one round trip, so
// that any number of app servers sharing one Redis (or one Redis Cluster)
// admit exactly what one process would.
//
// # Scripts
//
// Each algorithm is one script, in its own .lua file embedded in the binary,
// whose header states its KEYS, ARGV and reply; prelude.lua, which reads
// the arguments and holds the helpers every script shares, is sent in front
// of each as part of the same script. The arithmetic is the
// reference arithmetic of core/memstore, operation for operation, so both
// stores give the same Decision for the same history; the conformance suite
// in core/storetest holds both to the same hand-computed values. Scripts run
// with EVALSHA and fall back to EVAL when Redis answers NOSCRIPT (after a
// restart or a SCRIPT FLUSH), which also loads them again.
//
// # Keys and hash tags
//
// The state of a client key under a policy lives at
//
//	<prefix>{<client key>}:<policy name>:<algorithm code>
//
// with the prefix "rl:" by default (WithPrefix) and the codes fw, swl2,
// swc, tb and lb, so that a Name reused with another algorithm never meets
// a key of the wrong type. The braces are a Redis Cluster hash tag: all the
// keys of one client key live in one slot, so a script never spans slots
// (CROSSSLOT). The Limiter hands the
// store keys of printable ASCII without braces (core.NormalizeKey), so the
// tag is always the whole client key. A prefix should not contain braces
// either: a tag found in the prefix would put every key in one slot.
//
// Fixed window and sliding counter keep a HASH of the window start w, its
// count (n; c and the previous window's p) and the time t of the last
// admission; the buckets a HASH of their level v (written with %.17g, so
// that the float64 round-trips exactly) and t; the sliding log a ZSET with
// one member per admitted request, scored by its time in microseconds and
// naming its units in a running count, so that a request's cost in Redis
// does not grow with its Cost (the code swl held one member per unit).
// Times are integer microseconds, written with %d.
//
// # Time
//
// A Request with a zero Now lets the script read Redis TIME, so that app
// servers with skewed clocks still agree: there is one clock, the one of the
// Redis instance that owns the key. An explicit Now (core.WithClock, meant
// for tests) is passed to the script in microseconds instead.
//
// # TTLs
//
// Every key written gets a relative PEXPIRE, computed from the script's own
// now, no longer than its state can matter: the end of the window (fixed
// window), the end of the next window (sliding counter), W after the newest
// entry (sliding log, both keys), the time the bucket is full or the queue
// empty again (buckets, at least 1 ms). Denied requests write nothing, so
// they neither extend a TTL nor replicate; the sliding log's only exception
// is dropping members that have left the window, as core/memstore does.
// Expiry never decides anything on its own: a script that finds state past
// its expiry (possible only with explicit times) treats it as no state at
// all, exactly as core/memstore does.
//
// A request dated before the key's last admission (a clock stepping back:
// a Redis failover to a node whose clock is behind, or an explicit Now) is
// decided at that admission, as in core/memstore. Times are microseconds in
// float64 Lua numbers, exact until 2^53 µs, the year 2255.
//
// With an explicit Now, the store cannot know how fast that clock runs
// against Redis's own: a test may keep its clock still for seconds of real
// time. Keys written by such requests therefore live at least
// DefaultExplicitNowMinTTL (WithExplicitNowMinTTL), which changes no
// decision, only when the key is reclaimed. Requests that use Redis TIME
// are not affected.
//
// # Client options
//
// The store works with any redis.UniversalClient: *redis.Client,
// *redis.ClusterClient (all keys of a decision share a slot) or a
// *redis.Ring. A core.Limiter bounds every decision with its own timeout
// (core.WithTimeout), whatever the client does, and applies its FailMode
// when Redis does not answer in time. The client should still give up
// promptly, so that calls abandoned by the Limiter do not hold pool
// connections for seconds: build it with ContextTimeoutEnabled: true (so
// that the Limiter's deadline reaches the socket) and a small ReadTimeout
// and WriteTimeout, such as 100ms to 500ms, and a PoolSize sized for the
// decisions in flight.
package redisstore
