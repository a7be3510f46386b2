// Package headers tells the client about its rate limit: it writes the
// response header fields of a core.Decision, and parses them back on the
// client side.
//
// Four families of fields are supported, each switched on in Config:
//
//   - XRateLimit: X-RateLimit-Limit, X-RateLimit-Remaining and
//     X-RateLimit-Reset, the de facto convention of GitHub and others.
//     Reset is an absolute time, in Unix epoch seconds.
//   - Draft6: RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset, as
//     in draft-ietf-httpapi-ratelimit-headers-06. Reset is a delay in
//     seconds.
//   - Structured: RateLimit and RateLimit-Policy, as in
//     draft-ietf-httpapi-ratelimit-headers-10, in the Structured Field
//     syntax of RFC 9651: RateLimit: "name";r=<remaining>;t=<reset> and
//     RateLimit-Policy: "name";q=<quota>;w=<window>.
//   - RetryAfter: Retry-After (RFC 9110), in delay seconds, on denied
//     decisions only.
//
// Limit and Remaining are the Decision's: Limit is the policy's capacity
// (Burst for the buckets). Every duration is rounded up to whole seconds, so
// that a client that waits as told never comes back too early. The
// structured q and w describe the policy's rate, Policy.Limit requests per
// Policy.Window (rounded up to a whole second, at least one), for the
// buckets too: the draft registers no parameter for a bucket's burst, and
// unregistered parameters are left out, so r may exceed q on an idle
// bucket whose Burst is larger than its Limit.
//
// Nothing from the request is ever written: the values are numbers and the
// policy's Name, which core.Policy.Validate restricts to [A-Za-z0-9._-].
//
// The package imports no web framework. Write takes any Setter, which
// net/http's Header and fiber's Ctx both are.
package headers

import (
	"strconv"
	"time"

	"github.com/apigate/ratelimit/core"
)

// Field names, in the canonical form net/http keeps them in (so that
// http.Header.Set need not allocate to canonicalize them). Field names are
// case-insensitive on the wire.
const (
	XRateLimitLimit     = "X-Ratelimit-Limit"
	XRateLimitRemaining = "X-Ratelimit-Remaining"
	XRateLimitReset     = "X-Ratelimit-Reset"
	RateLimitLimit      = "Ratelimit-Limit"
	RateLimitRemaining  = "Ratelimit-Remaining"
	RateLimitReset      = "Ratelimit-Reset"
	RateLimit           = "Ratelimit"
	RateLimitPolicy     = "Ratelimit-Policy"
	RetryAfter          = "Retry-After"
)

// Setter is the one method Write needs from a response's header: both
// net/http's Header and fiber's *Ctx have it. Set replaces any value the
// field had.
type Setter interface {
	Set(key, value string)
}

// Config selects the families of fields that Write writes. The zero Config
// writes nothing; Default is what adapters use when not told otherwise.
type Config struct {
	// XRateLimit writes X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset, the last one in Unix epoch seconds, rounded up.
	XRateLimit bool
	// Draft6 writes RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset, the last one in delay seconds, rounded up.
	Draft6 bool
	// Structured writes RateLimit and RateLimit-Policy, as in
	// draft-ietf-httpapi-ratelimit-headers-10.
	Structured bool
	// RetryAfter writes Retry-After on denied decisions, in delay seconds
	// (see RetryAfterSeconds).
	RetryAfter bool
}

// Default returns the Config that writes XRateLimit, Draft6 and RetryAfter,
// and not Structured: the fields most clients read today.
func Default() Config {
	return Config{XRateLimit: true, Draft6: true, RetryAfter: true}
}

// Write sets the fields of the families cfg selects from d, the decision
// made at time now (the zero Time means time.Now). Only X-RateLimit-Reset
// depends on now; it is now+d.ResetAfter, rounded up to a whole second.
//
// Write writes nothing at all for a decision the FailMode allowed (Source
// core.SourceFailMode, failed open): such a decision was not made by the
// store and carries no information, and a client is better told nothing
// than told a quota that does not exist.
// Retry-After is written for denied decisions only. Negative counts and
// durations, which a core.Store never returns, are written as 0; the
// structured fields are left out when the policy's Name has a byte that a
// Structured Field string cannot hold, which a validated policy never has.
//
// Write is safe for concurrent use on distinct Setters. It allocates only
// the strings it passes to Set; numbers below 100 cost no allocation.
func Write(h Setter, d core.Decision, now time.Time, cfg Config) {
	if d.Allowed && d.Source == core.SourceFailMode {
		return
	}
	remaining := max(d.Remaining, 0)
	reset := ceilSeconds(d.ResetAfter)
	if cfg.XRateLimit || cfg.Draft6 {
		limit := strconv.FormatInt(max(d.Limit, 0), 10)
		rem := strconv.FormatInt(remaining, 10)
		if cfg.XRateLimit {
			if now.IsZero() {
				now = time.Now()
			}
			h.Set(XRateLimitLimit, limit)
			h.Set(XRateLimitRemaining, rem)
			h.Set(XRateLimitReset, strconv.FormatInt(ceilUnix(now.Add(max(d.ResetAfter, 0))), 10))
		}
		if cfg.Draft6 {
			h.Set(RateLimitLimit, limit)
			h.Set(RateLimitRemaining, rem)
			h.Set(RateLimitReset, strconv.FormatInt(reset, 10))
		}
	}
	if cfg.Structured && sfStringOK(d.Policy.Name) {
		writeStructured(h, d.Policy, remaining, reset)
	}
	if cfg.RetryAfter && !d.Allowed {
		h.Set(RetryAfter, strconv.FormatInt(RetryAfterSeconds(d), 10))
	}
}

// writeStructured sets RateLimit and RateLimit-Policy. Each value is built
// in a stack buffer and costs one allocation, the string given to Set.
// RateLimit-Policy is left out for a Decision that carries no Policy.
func writeStructured(h Setter, p core.Policy, remaining, reset int64) {
	// A name of MaxNameLen bytes, every one escaped, and two numbers of
	// up to 15 digits fit; append grows the buffer onto the heap should a
	// longer name (from an unvalidated policy) not.
	var buf [2*core.MaxNameLen + 48]byte
	b := appendSFString(buf[:0], p.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, min(remaining, maxSFInteger), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	h.Set(RateLimit, string(b))

	if p.Limit <= 0 || p.Window <= 0 {
		return
	}
	b = appendSFString(buf[:0], p.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, min(p.Limit, maxSFInteger), 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, max(ceilSeconds(p.Window), 1), 10)
	h.Set(RateLimitPolicy, string(b))
}

// RetryAfterSeconds returns the Retry-After of d in whole seconds: 0 when d
// is allowed, otherwise d.RetryAfter rounded up, and at least 1, so that a
// denied client always waits. Adapters put the same number in the body of
// their 429 responses.
func RetryAfterSeconds(d core.Decision) int64 {
	if d.Allowed {
		return 0
	}
	return max(ceilSeconds(d.RetryAfter), 1)
}

// maxSFInteger is the largest Structured Field integer (RFC 9651, Section
// 3.3.1). Counts above it, which a core.Store never returns, are written as
// it; durations in seconds never reach it.
const maxSFInteger = 999_999_999_999_999

// ceilSeconds returns d in seconds, rounded up; 0 when d is not positive.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// ceilUnix returns t as Unix epoch seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() != 0 {
		s++
	}
	return s
}

// sfStringOK reports whether s can be written as a Structured Field string:
// printable ASCII only (RFC 9651, Section 3.3.3).
func sfStringOK(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// appendSFString appends s as a Structured Field string, in quotes, with
// '"' and '\' escaped. s must satisfy sfStringOK.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}
