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
// core.Lockout keeps the client's lockout and strikes beside it, at the
// same key followed by ":lock", in the same slot, decided by the same
// script run (the algorithm's script wrapped in lockout.lua).
//
// Over a *redis.Client, decisions asked through a core.Limiter
// (Store.TakeBy) are batched: a few flusher goroutines, started at the
// first decision, send the decisions that arrive while the others are busy
// as one pipeline (one write and one read for many scripts), and a lone
// decision at once, as one EVALSHA, so no request waits for others to
// come. Each still waits no longer than the Limiter's timeout, whatever
// the client's options. Close stops the flushers. Over a cluster client
// or a Ring, decisions are not batched.
//
// The README's "Redis and Redis Cluster" section says more: client
// options, timeouts and fail modes, failover, and memory (run Redis with
// maxmemory-policy volatile-ttl).
package redisstore
