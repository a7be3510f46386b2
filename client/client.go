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
	"strings"
	"sync"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
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

// Option configures a Transport. New returns the first error an Option
// reports, wrapping core.ErrInvalidOption.
type Option func(*config) error

type config struct {
	maxRetries   int
	maxWait      time.Duration
	maxTotalWait time.Duration
	backoff      time.Duration
	pacedHosts   int  // 0: no pacing
	anyMethod503 bool // retry a 503 of a request that is not idempotent
}

func invalid(fn, detail string) error {
	return fmt.Errorf("%w: client.%s: %s", core.ErrInvalidOption, fn, detail)
}

// WithMaxRetries sets how many times one request is retried after a 429 or
// a 503 (default 4); 0 never retries. Negative is invalid.
func WithMaxRetries(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return invalid("WithMaxRetries", fmt.Sprintf("%d is negative", n))
		}
		c.maxRetries = n
		return nil
	}
}

// WithMaxWait sets the longest single wait (default 30s). When
// the server asks for a longer one, the Transport does not wait at all: it
// returns the server's response, whose fields tell the caller when to come
// back. It must be positive.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("WithMaxWait", fmt.Sprintf("%v is not positive", d))
		}
		c.maxWait = d
		return nil
	}
}

// WithMaxTotalWait bounds the sum of the waits of one request, pacing
// included (default one minute). A wait that would exceed it is
// not begun: the last response is returned. It must be positive.
func WithMaxTotalWait(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalid("WithMaxTotalWait", fmt.Sprintf("%v is not positive", d))
		}
		c.maxTotalWait = d
		return nil
	}
}

// WithBackoff sets the base of the exponential backoff used when a 429 or
// 503 says nothing usable about when to retry (default 100ms):
// retry n waits base plus a uniformly random part of base*2^n, capped by
// the maximum wait. It must be at least 1ms.
func WithBackoff(base time.Duration) Option {
	return func(c *config) error {
		if base < time.Millisecond {
			return invalid("WithBackoff", fmt.Sprintf("%v is under 1ms", base))
		}
		c.backoff = base
		return nil
	}
}

// WithPacing makes the Transport remember, per host, a response that said
// no quota is left (Remaining 0) and hold the next request to that host
// until the quota resets, instead of sending it to be refused. It keeps at
// most maxHosts hosts (1024 when 0), forgetting expired
// entries first. A negative maxHosts is invalid.
func WithPacing(maxHosts int) Option {
	return func(c *config) error {
		if maxHosts < 0 {
			return invalid("WithPacing", fmt.Sprintf("%d hosts is negative", maxHosts))
		}
		if maxHosts == 0 {
			maxHosts = defaultPacedHosts
		}
		c.pacedHosts = maxHosts
		return nil
	}
}

// WithRetryNonIdempotent makes the Transport retry a 503 of any request it
// can resend, as it does a 429, POST and PATCH included. By default a 503 is
// retried only for the idempotent methods of RFC 9110 (GET, HEAD, OPTIONS,
// TRACE, PUT, DELETE) and for requests with an Idempotency-Key or
// X-Idempotency-Key header: a 503 does not promise that the request had no
// effect (a gateway may answer it after the application acted), so
// resending a POST may do its work twice. To mark one request as safe to
// resend, set its Idempotency-Key header instead; a nil value marks it
// without sending the header, as for net/http's own retries.
func WithRetryNonIdempotent() Option {
	return func(c *config) error {
		c.anyMethod503 = true
		return nil
	}
}

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
// req is idempotent (see the package documentation for the whole table),
// when it can: when req has no body or req.GetBody can make a fresh copy of
// it. A request whose body cannot be replayed is sent once. Errors of the
// base transport are returned at once, never retried: the request may have
// been half sent. A wait ends at once when req's context is done, with the
// context's error.
//
// The time RoundTrip spends beyond the base transport's round trips is
// bounded by WithMaxTotalWait, whatever the server does: the body of a
// response that is retried is drained while the Transport waits, and
// closed, read or not, when the wait ends (net/http allows a Close while a
// Read is blocked, and ends that Read; a base transport whose bodies do not
// should not be used with a stalling server). The base transport's own
// round trips (connecting, sending, awaiting the headers) are bounded by
// req's context, http.Client.Timeout or the base's own timeouts, not by the
// Transport.
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

// serverWait is how long a 429 or 503 with header h, received at now, asks
// the client to wait: Retry-After (delay seconds or an HTTP-date), else the
// reset of RateLimit (its first item's t), RateLimit-Reset or
// X-RateLimit-Reset (Unix epoch seconds), the first of them that gives a
// positive delay. told is false when none does (absent, malformed, zero or
// in the past): the caller then backs off.
//
// A delay too long for a time.Duration is not malformed (delay-seconds is
// 1*DIGIT, with no bound, in RFC 9110 section 10.2.3): it is maxDuration,
// which every limit refuses, so that the response is returned instead of
// being retried at once. A field given more than once counts as its longest
// readable value: a proxy that repeats it still says how long to wait. The
// fields are read one by one, so that a malformed one spoils only itself.
// RateLimit is left to headers.Parse, which rejects a t too long for a
// time.Duration (over 292 years) as malformed.
func serverWait(h http.Header, now time.Time) (d time.Duration, told bool) {
	if d, told := longest(h.Values("Retry-After"), now, retryAfter); told {
		return d, true
	}
	if vs := h.Values("RateLimit"); len(vs) > 0 {
		if info, err := headers.Parse(http.Header{"Ratelimit": vs}); err == nil && info.ResetAfter > 0 {
			return info.ResetAfter, true
		}
	}
	if d, told := longest(h.Values("RateLimit-Reset"), now, delaySeconds); told {
		return d, true
	}
	return longest(h.Values("X-RateLimit-Reset"), now, epochSeconds)
}

// longest reads each of vs with read and returns the longest positive
// delay told.
func longest(vs []string, now time.Time, read func(v string, now time.Time) (time.Duration, bool)) (d time.Duration, told bool) {
	for _, v := range vs {
		if dv, ok := read(strings.Trim(v, " \t"), now); ok && dv > d {
			d, told = dv, true
		}
	}
	return d, told
}

// retryAfter reads a Retry-After value: delay-seconds (digits only, any
// length), or an HTTP-date in any of the three forms of RFC 9110 section
// 5.6.7. Anything else (a sign, a fraction, a unit, an exponent, spaces
// within, a date http.ParseTime cannot read) is malformed, and told is
// false.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if n, ok := digits(v); ok {
		return fromSeconds(n)
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return until(at, now)
}

// delaySeconds reads a delay in whole seconds, digits only, of any length;
// one too long for a time.Duration is maxDuration. told is false for 0 and
// for anything but digits.
func delaySeconds(v string, _ time.Time) (time.Duration, bool) {
	n, ok := digits(v)
	if !ok {
		return 0, false
	}
	return fromSeconds(n)
}

// fromSeconds is a delay of n whole seconds, maxDuration when longer; told
// is false for 0.
func fromSeconds(n int64) (time.Duration, bool) {
	switch {
	case n <= 0:
		return 0, false
	case n > maxDelaySeconds:
		return maxDuration, true
	}
	return time.Duration(n) * time.Second, true
}

// epochSeconds reads a time as Unix epoch seconds, digits only, of any
// length; one more than maxDuration ahead of now is maxDuration ahead (it
// is not passed to time.Unix, whose seconds would overflow near
// math.MaxInt64 into the past). Both n and the clamped now are not
// negative, so n-from cannot overflow.
func epochSeconds(v string, now time.Time) (time.Duration, bool) {
	n, ok := digits(v)
	if !ok {
		return 0, false
	}
	if from := max(now.Unix(), 0); n-from > maxDelaySeconds {
		return maxDuration, true
	}
	return until(time.Unix(n, 0), now)
}

// digits reads v as a non-negative decimal integer of any length, made of
// ASCII digits only, saturating at math.MaxInt64. ok is false when v is
// empty or has anything but digits. It reads v once, whatever its length,
// and allocates nothing.
func digits(v string) (n int64, ok bool) {
	if v == "" {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt64-int64(c-'0'))/10 {
			n = math.MaxInt64
		} else if n != math.MaxInt64 {
			n = n*10 + int64(c-'0')
		}
	}
	return n, true
}

// until is the delay from now to at, told only when positive. Sub saturates,
// so a date far in the future gives a huge delay, which the caller's
// maximum refuses, and never a negative one.
func until(at, now time.Time) (time.Duration, bool) {
	if d := at.Sub(now); d > 0 {
		return d, true
	}
	return 0, false
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
