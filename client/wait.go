package client

import (
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/apigate/ratelimit/headers"
)

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
		if layers, err := headers.Parse(http.Header{"Ratelimit": vs}); err == nil && len(layers) > 0 && layers[0].ResetAfter > 0 {
			return layers[0].ResetAfter, true
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
