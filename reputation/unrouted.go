package reputation

import "context"

// MarkUnrouted tells the Tracker that no route of the application serves
// the request whose context ctx is (see httplimit.Report for which
// context that is): its 404 answer then counts as Unrouted, a scanner's,
// and not as NotFound. Call it from a not-found handler the framework
// cannot tell from a route, such as a catch-all route ("/*") registered
// as the 404 page; docs/reputation.md lists, per framework, the idioms
// that need it. It does nothing on a context no Tracker scores.
func MarkUnrouted(ctx context.Context) {
	if r, ok := ctx.Value(ctxKey{}).(*reqRep); ok {
		r.unrouted.Store(true)
	}
}

// marked is s, the signal the flow read from the response of the request
// whose context ctx is, made Unrouted when it is a NotFound that the
// handler marked with MarkUnrouted.
func marked(ctx context.Context, s Signal) Signal {
	if s != NotFound {
		return s
	}
	if r, ok := ctx.Value(ctxKey{}).(*reqRep); ok && r.unrouted.Load() {
		return Unrouted
	}
	return s
}
