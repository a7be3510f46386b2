// Package redisstore is the Redis implementation of core.Store: every
// decision is one atomic Lua script in one round trip, so any number of app
// servers sharing one Redis (5.0 or later), or one Redis Cluster, admit
// exactly what one process would, with core/memstore's arithmetic.
//
// Build it over a go-redis client, and share it between limiters:
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(client)
//	...
//	limiter, err := core.NewLimiter(store, policy)
//
// The state of a client key under a policy lives at
// <prefix>{<client key>}:<policy name>:<algorithm code>, "rl:{203.0.113.7}:api:tb3"
// for instance; the braces are a Redis Cluster hash tag. A policy with a
// core.Policy.Lockout keeps the client's lockout and strikes beside it, at the
// same key followed by ":lock", in the same slot, decided by the same
// script run (the algorithm's script wrapped in lockout.lua).
//
// Store.Take returns the time it decided at, Redis TIME unless the caller
// gave one: the time that dates a Store.Refund of what it admitted, which
// one script, give_back.lua, applies to the state alone, never to a
// lockout. Store.Peek runs the algorithms' scripts asking for nothing.
//
// Over a *redis.Client, decisions (Store.Take, Peek, Refund) are batched: a few flusher goroutines, started at the
// first decision, send the decisions that arrive while the others are busy
// as one pipeline (one write and one read for many scripts), and a lone
// decision at once, as one EVALSHA, so no request waits for others to
// come. A decision asked while no other is under way (and with at most a
// second to its deadline) runs on its caller's goroutine instead, sparing
// a goroutine handoff each way: over a client of the Store's own, made
// from the client's options with a pool of at most two connections
// opened as needed, that puts the decision's deadline on every phase of
// the command (ContextTimeoutEnabled, no retries) and, on Linux with more
// than one CPU, polls the socket for the reply for up to 200 µs before it
// parks (WithBusyPoll), which takes a quarter to a half off a lone
// decision on loopback or a fast LAN. The first Store over a client adds a hook to it that sends those
// commands over the Store's own client, after the hooks added before it
// (tracing, metrics); hooks added after that Store was made do not see
// them, nor do dial hooks. Each decision still waits no longer than the
// Store's timeout (WithTimeout), whatever the client's options. Close stops the
// flushers and closes the Store's own connections. Over a cluster client
// or a Ring, decisions are not batched.
//
// A core.Limiter of several policies (layers) asks Store.Take of several
// requests, which decides every layer of a request all or nothing. Over a *redis.Client
// one script decides them all, in one round trip, as one atomic step. Over
// a Redis Cluster one script reaches one slot only: the layers are decided
// per slot of their client keys, one pipeline checking every slot without
// taking, then, when all would admit, a second taking. A request that
// loses a race on one slot between the two has what the others took
// undone at once; the undo never gives back more than the request took,
// so no layer ever admits beyond its limit, but it may give back less (a
// bucket's units, until they drain), so that another request may be
// denied that would have fitted. Layers that share a client key share a
// slot, and are one step again.
//
// The guide docs/redis.md says more: client
// options, timeouts and fail modes, failover, and memory (run Redis with
// maxmemory-policy volatile-ttl).
package redisstore
