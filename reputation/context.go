package reputation

import (
	"context"
	"sync/atomic"

	"github.com/apigate/ratelimit/internal/rules/scores"
)

// ctxKey is the context key of a request's reputation (see Penalize).
type ctxKey struct{}

// reqRep is what Penalize needs of a request: its Tracker and key; and
// whether MarkUnrouted marked it.
type reqRep struct {
	t        *Tracker
	key      string
	unrouted atomic.Bool
}

// repCtx is a request's context carrying its reqRep: one allocation a
// request, where context.WithValue and the reqRep would be two.
type repCtx struct {
	context.Context
	rep reqRep
}

// Value returns the request's reqRep for ctxKey, and what the parent
// holds for any other key.
func (c *repCtx) Value(key any) any {
	if _, ok := key.(ctxKey); ok {
		return &c.rep
	}
	return c.Context.Value(key)
}

// NewContext returns a context of the request whose client is key,
// derived from ctx: Penalize and MarkUnrouted, given it or a context
// derived from it, act on key's score through t.
func (t *Tracker) NewContext(ctx context.Context, key string) context.Context {
	return &repCtx{Context: ctx, rep: reqRep{t: t, key: key}}
}

// Penalize scores bad behaviour the application saw of the client of the
// request whose context ctx is (see httplimit.Report for which context
// that is), of weight w (at most 2^20): a failed captcha, an invalid
// token, a request to a honeypot route. It counts as a Reported signal,
// and does nothing on a context no Tracker scores.
func Penalize(ctx context.Context, w float64) {
	if r, ok := ctx.Value(ctxKey{}).(*reqRep); ok && w > 0 {
		r.t.signal(context.WithoutCancel(ctx), r.key, Reported, min(w, scores.MaxWeight))
	}
}

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
