// Package reputation scores clients by what they do and answers those
// that misbehave: a score per client key rises with bad signals (denied by
// a limit, locked out, deny-listed, 401 and 403 answers, 404s for paths no
// route serves, what the application reports) and halves every half-life,
// so that a client who stops, or a shared or recycled address, recovers.
// Bands of score act on the client: its limits scaled down, or a ban
// through the bans every app server holds, escalating on repeat.
//
// A Tracker is given to the HTTP flow with httplimit.WithReputation, which
// feeds it the flow's and the responses' signals and enforces its bans
// and scales:
//
//	rep, err := reputation.New(reputation.Config{
//		Bands: []reputation.Band{
//			{Name: "suspicious", Above: 10, Scale: 0.5}, // half the limits
//			{Name: "abusive", Above: 30, Ban: true},      // banned: 1 min, 2, 4... up to a day
//		},
//	})
//	flow, err := httplimit.New(store, layers, httplimit.WithReputation(rep))
//
// The signal that crosses a ban band bans the client at once: that request
// is the last to pass on that server, and with rediswatch's Bans as
// Config.Bans, every server holds the ban within its poll interval (200 ms
// by default). Bans escalate: Config.BanFor at the first offence, doubled
// for each offence remembered, up to Config.BanMax, ±10% at random so
// that banned clients do not return at one instant. Offences are
// remembered apart from the score, and forgiven on a half-life of their
// own (Config.OffenceHalfLife).
//
// Who the client is: the flow's client address (httplimit.WithClientIP:
// IPv6 grouped by /56, so that rotating addresses inside a prefix
// launders nothing, and no forwarding header believed but from trusted
// proxies, so that no client can lower another's reputation by forging
// one). Every signal the flow sees counts against it, whatever
// Config.Key: a request proves no identity to the flow, and one that
// claims another client's (a key id, a login form's username) must not
// get that client banned. Config.Key is whom Penalize counts against.
//
// A 404 for a path no route serves (a scanner walking /wp-admin, /.env)
// is told from a 404 on a route that exists (a WebDAV or file-sync client
// asking for a file it does not have, a missing static file): only the
// first weighs by default. A catch-all route serving as the 404 page,
// which no router can tell from a route, says so with MarkUnrouted.
//
// Scores are kept in process, or shared by every app server
// (Config.Scores: rediswatch.NewScores keeps them in Redis). Decisions
// read the copy of the scores this server holds (no round trip). A signal
// is one atomic add, which returns the score every server's signals made:
// the signal that crosses a band, on any server, acts. But a client's
// signals that come while its add is under way, or while Redis is
// failing, count in the copy at once and go to Redis within 100 ms,
// batched: a flood of bad requests costs Redis at most one script under
// way per client and server, and a slow Redis delays one bad request by
// at most 250 ms a second (a go-redis client with ContextTimeoutEnabled),
// not each. Memory is bounded under a flood of distinct keys.
//
// In shadow mode (Config.Shadow) a Tracker scores, and logs what it would
// do, but neither bans nor scales.
package reputation
