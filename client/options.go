package client

import (
	"fmt"
	"time"

	"github.com/apigate/ratelimit/core"
)

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
