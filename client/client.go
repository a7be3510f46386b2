// Package client is the other side of the limit: an http.RoundTripper that
// honours the rate-limit fields a server sends. On 429 and 503 it waits as
// the server says (Retry-After, then the draft-10 RateLimit field,
// RateLimit-Reset, X-RateLimit-Reset) or, told nothing usable, backs off
// exponentially with jitter; it retries only requests it can resend, and
// never waits longer than its own limits. The README's section "Calling a
// rate-limited API" has the details.
package client

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
)

// Defaults of a Transport built with no options.
const (
	DefaultMaxRetries   = 4
	DefaultMaxWait      = 30 * time.Second
	DefaultMaxTotalWait = time.Minute
	DefaultBackoff      = 100 * time.Millisecond
	DefaultPacedHosts   = 1024
)

// drainLimit is how much of a retried response's body is read so that its
// connection can be reused; a longer body is closed unread.
const drainLimit = 64 << 10

// Option configures a Transport. New returns the first error an Option
// reports, wrapping core.ErrInvalidOption.
type Option func(*config) error

type config struct {
	maxRetries   int
	maxWait      time.Duration
	maxTotalWait time.Duration
	backoff      time.Duration
	pacedHosts   int // 0: no pacing
}

func invalid(fn, detail string) error {
	return fmt.Errorf("%w: client.%s: %s", core.ErrInvalidOption, fn, detail)
}

// WithMaxRetries sets how many times one request is retried after a 429 or
// a 503 (default DefaultMaxRetries); 0 never retries. Negative is invalid.
func WithMaxRetries(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return invalid("WithMaxRetries", fmt.Sprintf("%d is negative", n))
		}
		c.maxRetries = n
		return nil
	}
}

// WithMaxWait sets the longest single wait (default DefaultMaxWait). When
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
// included (default DefaultMaxTotalWait). A wait that would exceed it is
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
// 503 says nothing usable about when to retry (default DefaultBackoff):
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
// most maxHosts hosts (DefaultPacedHosts when 0), forgetting expired
// entries first. A negative maxHosts is invalid.
func WithPacing(maxHosts int) Option {
	return func(c *config) error {
		if maxHosts < 0 {
			return invalid("WithPacing", fmt.Sprintf("%d hosts is negative", maxHosts))
		}
		if maxHosts == 0 {
			maxHosts = DefaultPacedHosts
		}
		c.pacedHosts = maxHosts
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
		maxRetries:   DefaultMaxRetries,
		maxWait:      DefaultMaxWait,
		maxTotalWait: DefaultMaxTotalWait,
		backoff:      DefaultBackoff,
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

// RoundTrip sends req, and resends it after a 429 or a 503 when it can:
// when req has no body or req.GetBody can make a fresh copy of it (the
// server refused the request, so resending it is safe whatever its
// method). A request whose body cannot be replayed is sent once. Errors of
// the base transport are returned at once, never retried: the request may
// have been half sent. A wait ends at once when req's context is done,
// with the context's error.
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
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable ||
			!replayable || attempt >= t.cfg.maxRetries {
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
		discard(resp.Body)
		if err := sleep(ctx, d); err != nil {
			if next != req {
				next.Body.Close()
			}
			return nil, err
		}
		waited += d
		send = next
	}
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
// reset of RateLimit, RateLimit-Reset or X-RateLimit-Reset. told is false
// when none of them gives a positive delay (absent, malformed, zero or in
// the past): the caller then backs off. A delay is never negative, and
// X-RateLimit-Reset dates are read only up to maxServerWait ahead.
func serverWait(h http.Header, now time.Time) (d time.Duration, told bool) {
	info, err := headers.Parse(h)
	if err != nil {
		// One malformed field spoils Parse; Retry-After alone may still be
		// good.
		info, err = headers.Parse(http.Header{headers.RetryAfter: h.Values(headers.RetryAfter)})
		if err != nil {
			return 0, false
		}
	}
	switch {
	case info.RetryAfter > 0:
		return info.RetryAfter, true
	case !info.RetryAt.IsZero():
		return until(info.RetryAt, now)
	case info.ResetAfter > 0:
		return info.ResetAfter, true
	case !info.Reset.IsZero():
		return until(info.Reset, now)
	}
	return 0, false
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

// discard drains a little of body, so that its connection can be reused,
// and closes it.
func discard(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, drainLimit)
	_ = body.Close()
}
