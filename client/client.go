// Package client is the other side of the limit: an http.RoundTripper that
// honours the rate-limit fields a server sends. On 429 and 503 it waits as
// the server says (Retry-After, then the draft-10 RateLimit field,
// RateLimit-Reset, X-RateLimit-Reset) or, told nothing usable, backs off
// exponentially with jitter; it retries only requests it can resend, and
// never waits longer than its own limits. The guide docs/client.md has
// the details.
//
// # Which responses are retried, for which requests
//
//	response                   request                                      retried
//	429 Too Many Requests      any method                                   yes
//	503 Service Unavailable    GET, HEAD, OPTIONS, TRACE, PUT, DELETE       yes
//	503 Service Unavailable    any method, with an Idempotency-Key or       yes
//	                           X-Idempotency-Key header
//	503 Service Unavailable    any other method (POST, PATCH, ...)          only with WithRetryNonIdempotent
//	any other status           any                                          no
//	error of the base          any                                          no
//
// A 429 is a refusal: the server did not act on the request, so resending
// it is safe whatever its method. A 503 may come from a gateway after the
// request reached the application, so by default only a request that may
// be repeated (RFC 9110 section 9.2.2, or one that carries an idempotency
// key, as net/http reads it) is resent. Methods are case-sensitive ("get"
// is not GET); an empty method is GET.
//
// "Yes" holds only when all of these hold: the request's body can be
// replayed (no body, http.NoBody, or a GetBody that gives a fresh copy, as
// http.NewRequest sets for *bytes.Buffer, *bytes.Reader and
// *strings.Reader), fewer than WithMaxRetries retries were made, and the
// wait the response asks for fits both WithMaxWait and what is left of
// WithMaxTotalWait. Otherwise the response is returned to the caller as it
// is.
package client

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Defaults of a Transport built with no options, as the options document
// them.
const (
	defaultMaxRetries   = 4
	defaultMaxWait      = 30 * time.Second
	defaultMaxTotalWait = time.Minute
	defaultBackoff      = 100 * time.Millisecond
	defaultPacedHosts   = 1024
)

// drainLimit is how much of a retried response's body is read so that its
// connection can be reused; a longer body is closed unread.
const drainLimit = 64 << 10

// maxDuration is the longest time.Duration, about 292 years: the wait that
// a longer delay stands for. Any limit refuses it.
const maxDuration = time.Duration(math.MaxInt64)

// maxDelaySeconds is the longest delay, in whole seconds, that a
// time.Duration holds.
const maxDelaySeconds = int64(maxDuration / time.Second)

// Transport is an http.RoundTripper that retries 429 and 503 responses as
// the server says, within its limits. It is safe for concurrent use.
type Transport struct {
	base  http.RoundTripper
	cfg   config
	pacer *pacer // nil without WithPacing
	now   func() time.Time
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport sending through base (http.DefaultTransport when
// nil).
func New(base http.RoundTripper, opts ...Option) (*Transport, error) {
	cfg := config{
		maxRetries:   defaultMaxRetries,
		maxWait:      defaultMaxWait,
		maxTotalWait: defaultMaxTotalWait,
		backoff:      defaultBackoff,
	}
	for _, o := range opts {
		if o == nil {
			return nil, invalid("New", "nil Option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.backoff > cfg.maxWait {
		return nil, invalid("New", fmt.Sprintf("backoff %v is longer than the maximum wait %v", cfg.backoff, cfg.maxWait))
	}
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{base: base, cfg: cfg, now: time.Now}
	if cfg.pacedHosts > 0 {
		t.pacer = newPacer(cfg.pacedHosts)
	}
	return t, nil
}

// RoundTrip sends req, and resends it after a 429, or after a 503 when
// req is idempotent (the package documentation has the whole table), when
// it can: when req has no body or req.GetBody can make a fresh copy of it.
// A request whose body cannot be replayed is sent once. Errors of the base
// transport are returned at once, never retried: the request may have been
// half sent. A wait ends at once when req's context is done, with the
// context's error.
//
// The time RoundTrip spends beyond the base transport's round trips is
// bounded by WithMaxTotalWait, whatever the server does: the body of a
// retried response is drained during the wait and closed when it ends,
// read or not (a base transport whose Close does not end a blocked Read,
// as net/http's does, should not be used with a stalling server). The
// base's own round trips are bounded by req's context,
// http.Client.Timeout or the base's own timeouts.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	var waited time.Duration
	if t.pacer != nil {
		// A hold longer than the limits is not waited: the request goes,
		// and the server's answer tells the caller when to come back.
		if d := t.pacer.delay(req.URL.Host, t.now()); d > 0 && d <= t.cfg.maxWait && d <= t.cfg.maxTotalWait {
			if err := sleep(ctx, d); err != nil {
				return nil, err
			}
			waited += d
		}
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	send := req
	for attempt := 0; ; attempt++ {
		resp, err := t.base.RoundTrip(send)
		if err != nil {
			return nil, err
		}
		if t.pacer != nil {
			t.pacer.observe(req.URL.Host, resp.Header, t.now())
		}
		if !replayable || attempt >= t.cfg.maxRetries || !t.retries(resp.StatusCode, req) {
			return resp, nil
		}
		d, ok := t.retryWait(resp.Header, attempt, waited)
		if !ok {
			return resp, nil
		}
		next := req
		if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
			body, err := req.GetBody()
			if err != nil {
				return resp, nil
			}
			r := *req
			r.Body = body
			next = &r
		}
		if err := waitDraining(ctx, d, resp); err != nil {
			if next != req {
				next.Body.Close()
			}
			return nil, err
		}
		waited += d
		send = next
	}
}

// retries reports whether a response of status to req may be retried: a
// 429 always (the server refused req), a 503 when req is idempotent or the
// Transport was told to retry any method.
func (t *Transport) retries(status int, req *http.Request) bool {
	switch status {
	case http.StatusTooManyRequests:
		return true
	case http.StatusServiceUnavailable:
		return t.cfg.anyMethod503 || idempotent(req)
	}
	return false
}

// idempotent reports whether req may be sent twice with the effect of
// once: its method is idempotent by RFC 9110 section 9.2.2, or it carries
// an idempotency key. The key is looked up as net/http's Transport does
// for its own retries (the canonical name present in the map, even with a
// nil value, which is not sent), so that one header marks a request for
// both.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xKey := req.Header["X-Idempotency-Key"]
	return key || xKey
}

// retryWait is how long to wait before retrying a response with header h,
// the attempt-th retry of a request that already waited waited; ok is false
// when the wait would break the Transport's limits. Every wait is at least
// the backoff base, so that no header can make the Transport spin.
func (t *Transport) retryWait(h http.Header, attempt int, waited time.Duration) (d time.Duration, ok bool) {
	d, told := serverWait(h, t.now())
	if told {
		d = max(d, t.cfg.backoff)
	} else {
		d = backoff(t.cfg.backoff, attempt, t.cfg.maxWait)
	}
	if d > t.cfg.maxWait || waited+d > t.cfg.maxTotalWait {
		return 0, false
	}
	return d, true
}

// backoff is the wait before retry attempt+1 when the server said nothing
// usable: base plus full jitter over base*2^attempt, capped at maxWait. It is
// never under base, so a server that answers at once cannot make the
// client spin.
func backoff(base time.Duration, attempt int, maxWait time.Duration) time.Duration {
	if base >= maxWait {
		return maxWait
	}
	ceil := base
	for i := 0; i < attempt && ceil < maxWait; i++ {
		if ceil > maxWait/2 {
			ceil = maxWait
			break
		}
		ceil *= 2
	}
	return base + min(rand.N(ceil), maxWait-base)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// waitDraining waits d, or until ctx is done, as sleep does, while it
// drains resp's body so that its connection can be reused. The body is
// closed by the time waitDraining returns, whatever the server does:
//
//   - a body declared longer than drainLimit is closed unread, as it would
//     be after reading drainLimit of it;
//   - any other body is read, up to drainLimit, by a goroutine that closes
//     it at the end; when the wait ends first (a body that stalls, or
//     trickles), the body is closed from here, which ends a Read blocked in
//     net/http (the goroutine then ends too), and the connection is not
//     reused.
//
// The drain so costs no time: it is done within a wait that is spent
// anyway, and a stalled body cannot hold the Transport past its limits.
func waitDraining(ctx context.Context, d time.Duration, resp *http.Response) error {
	body := resp.Body
	if body == nil {
		return sleep(ctx, d)
	}
	if body == http.NoBody || resp.ContentLength == 0 || resp.ContentLength > drainLimit {
		_ = body.Close()
		return sleep(ctx, d)
	}
	var once sync.Once
	closeBody := func() { once.Do(func() { _ = body.Close() }) }
	go func() {
		_, _ = io.CopyN(io.Discard, body, drainLimit)
		closeBody()
	}()
	err := sleep(ctx, d)
	closeBody() // at once when the goroutine closed it already
	return err
}
