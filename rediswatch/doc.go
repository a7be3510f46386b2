// Package rediswatch shares bans and live limit overrides between every
// app server through Redis, each server keeping an in-process copy that
// a goroutine keeps in step with Redis: [Bans] (an access.Matcher) and
// [Overrides] (a core.PolicySource). Neither calls Redis on a request's
// path: Match and Adjust read the local copy with one atomic load. And
// [NewScores] shares the scores of package reputation's Trackers.
//
// Both watch their Redis key the same way, with one option set (WithKey,
// WithPollInterval, WithMax, WithLogger): the constructor reads Redis
// before it returns, within its ctx; then a goroutine polls every poll
// interval, one script call that sends nothing when nothing changed,
// until Close. When Redis cannot be read, the last copy stays in force,
// and the outage and its end are logged once each. A Redis that comes
// back empty (restarted without persistence, or flushed) is told from an
// operator's clearing by a marker key beside the data, and the servers
// write back what they hold. The keys and their layout are those of the
// packages redisbans and redisoverrides before this one (default keys
// "ratelimit:bans" and "rl:overrides"), so that servers of either version
// share the same data.
//
// # Bans
//
// A [Bans] shares bans between every app server through Redis: a ban
// added on one server is in force on all of them within about a
// poll interval (200 ms by default, well under a second), survives the
// restart of any server, and ends when its Redis TTL runs out.
//
// A Bans is an access.Matcher for the deny side of the HTTP flow. Match
// never calls Redis: it reads a local snapshot, immutable, with one
// atomic load and no allocation. Every change is logged in Redis, and a
// goroutine reads the log every poll interval (one script call, as cheap
// as a GET when nothing changed) and applies the changes to the snapshot,
// in time proportional to the changes, not to the bans held. It reloads
// every ban only when it fell too far behind the log (more than 10,000
// changes), when the log cannot be trusted, and every resync interval.
// Ban, BanMany, Unban and List call Redis.
//
// # The keys of Bans
//
// Every key has the hash tag of the key (WithKey, default ratelimit:bans), so all of them
// sit in one Redis Cluster slot and every script touches one slot:
//
//	{ratelimit:bans}:b:<id>  one ban: "v1|<expires_ms>|<reason>", with a
//	                         PXAT TTL at its end (none if permanent)
//	{ratelimit:bans}:i       the index: a sorted set of ids by expires_ms
//	{ratelimit:bans}:v       the version: the sequence number of the
//	                         last change
//	{ratelimit:bans}:l       the log: a stream of the last 10,000 or so
//	                         changes, each with its sequence number and
//	                         the one before it
//	{ratelimit:bans}:m       the marker: set by the first server, never
//	                         deleted by this package (see below)
//	{ratelimit:bans}:j       the recovery journal, for a while after a
//	                         loss (see below)
//	{ratelimit:bans}:w       the lease of the server writing the bans
//	                         back after a loss, while it does
//
// An id is "p:" and a range ("p:203.0.113.0/24", "p:2001:db8::1/128") or
// "k:" and a client key ("k:user:42"). Ban, BanMany and Unban are Lua
// scripts that change the bans, the index, the log and the version at
// once. A poll reads the log entries after the last one applied; it
// applies them only if they chain from the snapshot's version to Redis's
// (each names the version before it), and reloads otherwise. A load reads
// the index in pages of about 2,000 ids (ZSCAN) with their bans, one
// small script call each, and then, before the new snapshot is in force,
// applies the changes logged since it began: a ban made or lifted while
// the pages were read is in force as it is at the end. Meanwhile, before
// each page, a reload also applies the changes logged since the last to
// the snapshot in force (after a loss, those since the write-back), so
// that a ban made during a load of seconds reaches the server within a
// page, not when the load ends.
//
// Redis keeps the time: a Ban's TTL for a duration runs from Redis's TIME, and Expires
// in what List and Ban return are by Redis's clock. The snapshot shifts
// them by this server's clock skew from Redis (when over 100 ms), so that
// Match, given time.Now(), ends a ban at the instant Redis does.
//
// The scripts need Redis 6.2 or later (SET with PXAT, ZRANGE with BYSCORE
// and REV, XRANGE with an exclusive start); on a Redis Cluster every
// client of one key talks to the node that holds its slot.
//
// # When Redis fails
//
// When Redis cannot be reached, Match keeps the last snapshot, expiring
// its bans locally at their instant; the outage and its end are logged
// once each (WithLogger), and the first poll that succeeds catches up. A
// ban found malformed in Redis (written by hand, or by another version) is
// skipped, and logged with the number skipped; it never stops the others
// from loading. A malformed log entry makes the servers reload. A load
// reads at most WithMax bans, the permanent ones first and then those
// that expire last.
//
// # A Redis that loses the bans
//
// A Redis restarted without persistence, or flushed, comes back empty,
// which would lift every ban on every server. So the servers keep a
// marker key: a server that finds it gone writes the bans it holds back
// (those not expired, with their original end) and then sets the marker,
// before it takes anything from Redis; the others wait for the marker
// meanwhile. Ban and Unban refuse to write while it is gone, and write
// the bans back (or wait) first. Nothing is lifted that was not unbanned
// or did not expire.
//
// The server that writes back may not have seen the last changes before
// the loss yet: an Unban made on another server just before it, say. So
// every server remembers the last change it knows of each of the last
// 10,000 targets changed (its journal), and writing back also starts a
// recovery journal in Redis (for ten minutes) of the change each target
// last had. Every other server, when it sees the marker's new epoch,
// merges into Redis each change it knows that is later than what Redis
// knows of its target, and the bans it holds that Redis lacks if it had
// seen a later version than the server that wrote back; only then does it
// reload. So the Unban stands, and a ban made just before the loss that
// the first server had not seen is written back too. A server that comes
// back after the recovery journal is gone merges nothing. What no running
// server knows is lost with Redis: a ban lifted by a server that then
// stopped, and that the others had not yet seen lifted, comes back.
//
// Loads and writing back go in pages, so that with 100,000 bans no call
// holds Redis more than a few milliseconds or comes near a client's read
// timeout of 200 ms, and a limiter on the same Redis keeps deciding:
// a load is about 50 calls, writing back about 400 (BenchmarkResync,
// BenchmarkWriteBack). Every server then reloads once. A server that
// stops while writing back leaves its lease to run out (3 s); the next
// takes over.
//
// To clear every ban by hand, delete the bans, the index and the log, and
// bump the version (or remove them with Unban), not the marker: bans and
// marker both gone look like a lost Redis, and the servers write back
// what they hold. A Redis that restarts with its data (RDB, AOF) keeps its
// marker: nothing is written back (an RDB older than the last changes
// rolls them back, as it rolls back everything else).
//
// Bans with a TTL are volatile keys: a Redis with a maxmemory and a
// volatile-* or allkeys-* policy may evict them under memory pressure, as
// it may evict limiter state; an evicted ban is dropped at the next
// resync. Give bans a Redis (or a maxmemory) of their own if losing one
// under pressure is not acceptable.
//
// # Overrides
//
// An [Overrides] shares live limit overrides between every app server
// through a Redis hash: an operator sets "limit=500" for the
// "search" layer from one server, or with redis-cli, and every server
// decides by it within about a poll interval (250 ms by default, at most
// a second), without a restart.
//
//	w, err := rediswatch.NewOverrides(ctx, client)
//	...
//	defer w.Close()
//	flow, err := httplimit.New(store, layers, httplimit.WithCore(core.WithPolicySource(w)))
//	...
//	err = w.Put(ctx, "search", overrides.Override{Limit: 500}) // every server, within a second
//
// or by hand, on the servers' Redis:
//
//	HSET rl:overrides search "limit=500 burst=50"
//	HDEL rl:overrides search
//
// An Overrides is a core.PolicySource: its Adjust is one atomic load of an
// in-process overrides.Set, never I/O. A goroutine reads the hash every
// poll interval (WithPollInterval) with one script (EVALSHA), which sends
// the fields only when the hash changed. Each field is a layer's name
// (for a Limiter built by core.NewLimiter, its policy's name); its value
// is an Override in the text form of overrides.Parse.
//
// # Hostile or broken overrides
//
//   - A malformed field (a name that is no valid policy name, a value
//     that does not parse, one over 256 bytes) is logged
//     once (WithLogger) and keeps its last good value, or stays absent if
//     it never had one; the other fields load. The script sends a marker
//     instead of a value over 256 bytes, and cuts a name over
//     64 bytes, so that giant data never crosses the network.
//   - A value that parses but cannot apply to its layer's policy (a
//     burst its rate cannot refill within 366 days; see
//     overrides.Override) is not applied: the layer's last good override
//     stays in force for that policy, and the Overrides logs it once, when
//     a request first meets it. Put refuses such a value, for the
//     policies this Overrides has adjusted.
//   - A hash of more than WithMax fields is refused whole: logged,
//     the last good overrides kept, no field sent.
//   - A field removed from the hash is removed.
//   - When Redis cannot be read, the last good overrides stay in force;
//     the outage and its end are logged once each.
//
// # A Redis that loses the overrides
//
// A Redis without persistence comes back empty, which would silently lift
// every override. So the servers keep a marker key beside the hash (in
// the hash's slot; see WithKey), set when the first Overrides starts and
// never deleted by this package. A read that finds the marker gone means
// Redis lost its data: the first Overrides to see it writes its last good
// overrides back (each field the hash lacks: one written since the loss
// wins), sets the marker and logs it, in one script; the other servers
// then read the restored hash. A read that finds the marker and an empty
// hash means an operator cleared it: the overrides go. Put and Delete
// refuse to write while the marker is gone, and restore first, so that a
// write just after a restart does not mark the lost overrides as
// cleared. A Redis that restarts with its data (RDB, AOF) gives back the
// marker with the hash: nothing happens.
//
// To clear every override by hand, delete the hash (DEL rl:overrides),
// not the marker: a hash and marker both gone look like a lost Redis, and
// the servers write back what they hold.
//
// The scripts need Redis 3.2 or later (HSTRLEN). On a Redis Cluster the
// hash and the marker share a slot, so each script touches one slot.
//
// # Scores
//
// [NewScores] keeps the scores of package reputation in Redis, for
// reputation.Config.Scores, so that a client's signals on every server
// add up to one score. Each Tracker still reads its own copy in process;
// a signal runs one script (scores.lua) that decays the client's score,
// adds the weight, sets the key's TTL to when it has decayed to nothing,
// and returns the score, which the copy takes. A score a Redis loses is
// not written back: a score is a hint, and the Tracker's copy keeps it
// until it decays.
package rediswatch
