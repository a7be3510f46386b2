package httplimit

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/rules/userkey"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/keyfuncs"
)

// contentTypeJSON is the Content-Type of every body the default handlers
// write.
const contentTypeJSON = "application/json"

// Error codes, the "error" member of the default JSON bodies. They are
// documented, with the whole body, on DefaultResponder.
const (
	codeExceeded    = "rate_limit_exceeded"    // 429: over the limit
	codeUnavailable = "rate_limit_unavailable" // 503: store failed, closed
	codeKeyMissing  = "rate_limit_key_missing" // 400: no key in the request
	codeInternal    = "rate_limit_error"       // 500: misconfiguration, panic
	codeCanceled    = "request_canceled"       // 499: the client left
	codeForbidden   = "forbidden"              // 403: on a deny list
)

// statusClientClosedRequest is the status of a request whose client left
// before it was decided or served: 499, nginx's "client closed request".
// net/http has no name for it.
const statusClientClosedRequest = 499

// Responder answers a request that does not proceed. err is nil when the
// request was decided: d is then a denial, over the limit (d.Source is the
// store's, the fallback's or the deny cache's) or refused because the
// store failed under a layer's FailClosed (d.Source is
// core.SourceFailMode). The rate-limit headers, Retry-After included, are
// already set. A non-nil err means nothing was decided, and d is zero: a
// deny list matched the client (err is then the access.Entry that
// matched: errors.As(err, &entry) reads it, say for a 451), the key
// function found no key or failed, the cost was bad, the client left
// (the request's context ended: err wraps its error), or a function given
// to the flow panicked (a *PanicError). A Responder must write a
// response: the adapter stops the chain either way.
type Responder func(r keyfuncs.Request, w Response, d core.Decision, err error)

// DefaultResponder is the [Responder] of a flow given no [WithResponder].
// Its bodies are JSON, {"error":code,"message":text}, and never echo the
// request or an error's text:
//
//	status  code                    when
//	429     rate_limit_exceeded     err is nil: over the limit
//	503     rate_limit_unavailable  err is nil, d.Source is core.SourceFailMode (store down, FailClosed)
//	403     forbidden               err is an access.Entry; no rate-limit header, the entry not told
//	499     request_canceled        the request's context ended and err wraps its error
//	400     rate_limit_key_missing  err wraps keyfuncs.ErrNoKey
//	500     rate_limit_error        any other error (a key function's own timeout too), a *PanicError
//
// The 429 and 503 bodies add "retry_after_seconds":N, the Retry-After
// value (d.RetryAfter rounded up to a second, at least 1), which their
// message repeats ("Too many requests, retry after 12 seconds."). To
// answer 401 rather than 400, authenticate before the limiter or replace
// this responder: a 401 needs a challenge only the application knows.
func DefaultResponder(r keyfuncs.Request, w Response, d core.Decision, err error) {
	if err == nil {
		n := limits.RetryAfterSeconds(d.Allowed, d.RetryAfter)
		if d.Source == core.SourceFailMode {
			_ = w.Write(http.StatusServiceUnavailable, contentTypeJSON, retryBody(codeUnavailable, "Rate limiting is temporarily unavailable, retry after ", n))
			return
		}
		_ = w.Write(http.StatusTooManyRequests, contentTypeJSON, retryBody(codeExceeded, "Too many requests, retry after ", n))
		return
	}
	var le access.Entry
	switch {
	case errors.As(err, &le):
		_ = w.Write(http.StatusForbidden, contentTypeJSON,
			[]byte(`{"error":"`+codeForbidden+`","message":"Access denied."}`))
		return
	case isPanic(err):
	case r != nil && clientLeft(r.Context(), err):
		_ = w.Write(statusClientClosedRequest, contentTypeJSON,
			[]byte(`{"error":"`+codeCanceled+`","message":"The client closed the request."}`))
		return
	case errors.Is(err, keyfuncs.ErrNoKey):
		_ = w.Write(http.StatusBadRequest, contentTypeJSON,
			[]byte(`{"error":"`+codeKeyMissing+`","message":"The request does not identify its client."}`))
		return
	}
	_ = w.Write(http.StatusInternalServerError, contentTypeJSON,
		[]byte(`{"error":"`+codeInternal+`","message":"Internal server error."}`))
}

// LogErrors returns an ErrorHandler that logs to logger, or to
// slog.Default() at the time of each call when logger is nil, with the
// error, the method and the route pattern, never the key. What any client
// can cause is logged at Debug: a request without a key
// (keyfuncs.ErrNoKey), a client that left (the request's context ended).
// A recovered panic (a *PanicError) is logged at Error with its stack. A
// store failure is logged at Warn, per Flow: the first of an outage at
// once, then at most one line each 10 seconds, counting the failures left
// unlogged (at most 7 lines in any minute), and one Info line when the
// store decides again. Any other error (a misconfiguration) is logged at
// Warn.
//
// Two mistakes of setup show at the first request, once at Warn with
// their fix, then at Debug: the first request without a key (a limiter
// mounted before the middleware that sets its key refuses them all), and
// the first user ID of a type no key function can use. Each is counted
// per ErrorHandler LogErrors returns; a Flow given no WithErrorHandler has
// its own. docs/monitoring.md lists the records.
func LogErrors(logger *slog.Logger) ErrorHandler {
	own := newStoreOutage(time.Now())         // for store failures heard from no Flow
	var noKeyWarned, idTypeWarned atomic.Bool // the first of each was logged at Warn
	return func(r keyfuncs.Request, err error) {
		l := logger
		if l == nil {
			l = slog.Default()
		}
		ctx := r.Context()
		if kind := outcome.StoreErrorKind(err); kind != "" {
			if !l.Enabled(ctx, slog.LevelWarn) {
				return
			}
			o := own
			var sf *storeFailure
			if errors.As(err, &sf) {
				o = sf.outage
			}
			o.failed(l, r, err, kind, time.Now())
			return
		}
		level, kind := slog.LevelWarn, "request not decided"
		var stack []slog.Attr
		switch {
		case isPanic(err):
			level, kind = slog.LevelError, "panic"
			var pe *PanicError
			if errors.As(err, &pe) {
				stack = append(stack, slog.String("stack", string(pe.Stack)))
			}
		case clientLeft(ctx, err):
			level, kind = slog.LevelDebug, "request canceled"
		case errors.Is(err, keyfuncs.ErrNoKey):
			level, kind = slog.LevelDebug, "no key in request"
			if !noKeyWarned.Load() && noKeyWarned.CompareAndSwap(false, true) {
				level, kind = slog.LevelWarn, msgFirstNoKey
			}
		case errors.Is(err, userkey.ErrIDType):
			level, kind = slog.LevelDebug, "user ID of an unusable type"
			if !idTypeWarned.Load() && idTypeWarned.CompareAndSwap(false, true) {
				level, kind = slog.LevelWarn, msgFirstIDType
			}
		}
		l.LogAttrs(ctx, level, "ratelimit: "+kind, append([]slog.Attr{
			slog.String("error", err.Error()),
			slog.String("method", r.Method()),
			slog.String("route", r.Route())}, stack...)...)
	}
}

// The messages of LogErrors' first-occurrence checks, after "ratelimit: ".
// docs/monitoring.md quotes them.
const (
	msgFirstNoKey = "no key in request, the first (later ones are logged at Debug): " +
		"if every request should have a key, mount the limiter after the middleware that sets it (authentication), " +
		"or fall back to the client IP with keyfuncs.FirstOf"
	msgFirstIDType = "user ID of an unusable type, the first (later ones are logged at Debug): " +
		"a user ID must be a string, an integer or a fmt.Stringer; store the ID itself, not a struct that holds it, " +
		"or convert it in the middleware that sets it; until then, each such request is refused (500 by default)"
)

// retryBody encodes {"error":code,"message":msg+N+" seconds.","retry_after_seconds":N}
// without reflection. code and msg are constants holding nothing to escape.
func retryBody(code, msg string, n int64) []byte {
	b := make([]byte, 0, 64+len(code)+len(msg))
	b = append(b, `{"error":"`...)
	b = append(b, code...)
	b = append(b, `","message":"`...)
	b = append(b, msg...)
	b = strconv.AppendInt(b, n, 10)
	if n == 1 {
		b = append(b, ` second.","retry_after_seconds":`...)
	} else {
		b = append(b, ` seconds.","retry_after_seconds":`...)
	}
	b = strconv.AppendInt(b, n, 10)
	return append(b, '}')
}

// itoa is strconv.FormatInt in base 10.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
