package headers

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// ErrMalformed reports a rate-limit field whose value Parse cannot read.
// The errors Parse returns wrap it with the field's name.
var ErrMalformed = errors.New("headers: malformed rate-limit field")

// maxDelaySeconds is the longest delay, in seconds, that a time.Duration
// holds (about 292 years); Parse rejects longer ones.
const maxDelaySeconds = int64(1<<63-1) / int64(time.Second)

// fields is what a client learns from the rate-limit fields of a response.
// A value whose field was absent is zero; Found tells which families had at
// least one field present. When several families carry the same value, the
// most specific one is kept: the structured fields, then Draft6, then
// XRateLimit.
type fields struct {
	// Found reports the families present. A RateLimit-Policy in the
	// integer syntax of drafts 03 to 07 (100;w=60, as express-rate-limit
	// writes it) counts as Draft6.
	Found Config
	// Limit is the most requests that fit in the quota (RateLimit-Limit or
	// X-RateLimit-Limit).
	Limit int64
	// Remaining is how many more requests would pass now (RateLimit's r,
	// RateLimit-Remaining or X-RateLimit-Remaining).
	Remaining int64
	// ResetAfter is the delay until the quota is whole again, in whole
	// seconds (RateLimit's t or RateLimit-Reset; X-RateLimit-Reset, Unix
	// epoch seconds, is read as its delay from the response's Date, as an
	// HTTP-date Retry-After is).
	ResetAfter time.Duration
	// RetryAfter is the delay after which a denied request may be retried
	// (Retry-After). A Retry-After in delay seconds, as Writer writes it,
	// is read as it is; one that is an HTTP-date is read as its delay from
	// the response's Date (from the current time when Date is absent or
	// unreadable, rounded up to a whole second), and 0 for a date past.
	RetryAfter time.Duration
	// Policy is the name of the policy that RateLimit reports on, or, when
	// there is no RateLimit field, of the first RateLimit-Policy item.
	Policy string
	// Quota and Window are the q and w of the RateLimit-Policy item named
	// Policy (or of its first item, when there is no RateLimit field):
	// Quota requests per Window, which is in whole seconds.
	Quota  int64
	Window time.Duration
}

// parseFirst reads the rate-limit fields of a response into the fields of
// its binding layer. Every family that a Writer writes is read back,
// whatever the Config; further members of the RateLimit and
// RateLimit-Policy lists are checked, and Parse reads them. A response with
// no rate-limit field gives the zero fields.
//
// Counts and delays are decimal digits only: a sign, a fraction, more than
// 15 digits or a delay longer than a time.Duration give an error wrapping
// ErrMalformed, as do a field that may appear once appearing twice and a
// structured field that breaks RFC 9651 or lacks r (in RateLimit) or q (in
// RateLimit-Policy). RateLimit in the dictionary syntax of draft 07 is
// malformed too.
func parseFirst(h http.Header) (fields, error) {
	var info fields
	for _, f := range []struct {
		name   string
		family *bool
		dst    *int64
	}{
		{canonXRateLimitLimit, &info.Found.XRateLimit, &info.Limit},
		{canonXRateLimitRemaining, &info.Found.XRateLimit, &info.Remaining},
		{canonRateLimitLimit, &info.Found.Draft6, &info.Limit},
		{canonRateLimitRemaining, &info.Found.Draft6, &info.Remaining},
	} {
		v, ok, err := single(h, f.name)
		if err != nil {
			return fields{}, err
		}
		if !ok {
			continue
		}
		if *f.dst, err = count(f.name, v); err != nil {
			return fields{}, err
		}
		*f.family = true
	}

	if v, ok, err := single(h, canonXRateLimitReset); err != nil {
		return fields{}, err
	} else if ok {
		n, err := count(canonXRateLimitReset, v)
		if err != nil {
			return fields{}, err
		}
		info.ResetAfter, info.Found.XRateLimit = delayUntil(time.Unix(n, 0), h.Get("Date"), time.Now()), true
	}
	if v, ok, err := single(h, canonRateLimitReset); err != nil {
		return fields{}, err
	} else if ok {
		if info.ResetAfter, err = seconds(canonRateLimitReset, v); err != nil {
			return fields{}, err
		}
		info.Found.Draft6 = true
	}
	if v, ok, err := single(h, canonRetryAfter); err != nil {
		return fields{}, err
	} else if ok {
		if v != "" && isDigit(v[0]) {
			info.RetryAfter, err = seconds(canonRetryAfter, v)
		} else if at, perr := http.ParseTime(v); perr != nil {
			err = malformed(canonRetryAfter, v, "neither delay seconds nor an HTTP-date")
		} else {
			info.RetryAfter = delayUntil(at, h.Get("Date"), time.Now())
		}
		if err != nil {
			return fields{}, err
		}
		info.Found.RetryAfter = true
	}

	if err := parseStructured(h, &info); err != nil {
		return fields{}, err
	}
	return info, nil
}

// parseStructured reads RateLimit and RateLimit-Policy into info.
func parseStructured(h http.Header, info *fields) error {
	if vs := h.Values(canonRateLimit); len(vs) > 0 {
		v := strings.Join(vs, ", ")
		items, err := parseSFList(v)
		if err != nil {
			return malformed(canonRateLimit, v, err.Error())
		}
		for i, it := range items {
			if it.val.kind != sfString && it.val.kind != sfToken {
				return malformed(canonRateLimit, v, "an item is not a policy name")
			}
			r, err := intParam(it, "r", true, maxSFInteger)
			if err != nil {
				return malformed(canonRateLimit, v, err.Error())
			}
			t, err := intParam(it, "t", false, maxDelaySeconds)
			if err != nil {
				return malformed(canonRateLimit, v, err.Error())
			}
			if i == 0 {
				info.Policy, info.Remaining, info.ResetAfter = it.val.str, r, time.Duration(t)*time.Second
			}
		}
		info.Found.Structured = true
	}

	vs := h.Values(canonRateLimitPolicy)
	if len(vs) == 0 {
		return nil
	}
	named := info.Found.Structured // RateLimit named the policy to report
	v := strings.Join(vs, ", ")
	items, err := parseSFList(v)
	if err != nil {
		return malformed(canonRateLimitPolicy, v, err.Error())
	}
	chosen := false // whether an item gave info its q and w
	for _, it := range items {
		var q int64
		switch it.val.kind {
		case sfString, sfToken:
			if q, err = intParam(it, "q", true, maxSFInteger); err != nil {
				return malformed(canonRateLimitPolicy, v, err.Error())
			}
			info.Found.Structured = true
		case sfInteger: // drafts 03 to 07: the quota itself, then w
			if q = it.val.num; q < 0 {
				return malformed(canonRateLimitPolicy, v, "negative quota")
			}
			info.Found.Draft6 = true
		default:
			return malformed(canonRateLimitPolicy, v, "an item is neither a policy name nor a quota")
		}
		w, err := intParam(it, "w", false, maxDelaySeconds)
		if err != nil {
			return malformed(canonRateLimitPolicy, v, err.Error())
		}
		if chosen {
			continue
		}
		if named {
			if it.val.kind == sfInteger || it.val.str != info.Policy {
				continue
			}
		} else {
			info.Policy = it.val.str // "" for an integer item
		}
		chosen = true
		info.Quota, info.Window = q, time.Duration(w)*time.Second
	}
	return nil
}

// delayUntil returns the delay from the response's date (the Date field,
// or now when date is absent or unreadable) to at, an HTTP-date, never
// negative. From now it is rounded up to a whole second, so that a client
// that waits as told does not come back early: an HTTP-date has whole
// seconds, now does not.
func delayUntil(at time.Time, date string, now time.Time) time.Duration {
	if sent, err := http.ParseTime(date); err == nil {
		return max(at.Sub(sent), 0)
	}
	return time.Duration(min(ceilSeconds(at.Sub(now)), maxDelaySeconds)) * time.Second
}

// single returns the value of a field that may appear once, without its
// surrounding whitespace, and whether it is present.
func single(h http.Header, name string) (string, bool, error) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
		return strings.Trim(vs[0], " \t"), true, nil
	}
	return "", true, malformed(name, strings.Join(vs, ", "), "repeated")
}

// count parses a non-negative decimal integer of at most 15 digits, the
// bound of a Structured Field integer.
func count(name, v string) (int64, error) {
	if v == "" || len(v) > 15 {
		return 0, malformed(name, v, "not a count of 1 to 15 digits")
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if !isDigit(v[i]) {
			return 0, malformed(name, v, "not a count of 1 to 15 digits")
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, nil
}

// seconds parses a delay in whole seconds.
func seconds(name, v string) (time.Duration, error) {
	n, err := count(name, v)
	if err == nil && n > maxDelaySeconds {
		err = malformed(name, v, "too long a delay")
	}
	return time.Duration(n) * time.Second, err
}

// intParam returns the value of the item's parameter key, which must be an
// Integer in [0, maxVal]; a missing parameter is 0, or an error when
// required.
func intParam(it sfItem, key string, required bool, maxVal int64) (int64, error) {
	p, ok := it.param(key)
	switch {
	case !ok && required:
		return 0, fmt.Errorf("parameter %s is missing", key)
	case !ok:
		return 0, nil
	case p.kind != sfInteger:
		return 0, fmt.Errorf("parameter %s is not an integer", key)
	case p.num < 0 || p.num > maxVal:
		return 0, fmt.Errorf("parameter %s is out of range", key)
	}
	return p.num, nil
}

// malformed returns an error wrapping ErrMalformed. The value is the
// server's, not the client's own; it is quoted and cut short all the same.
func malformed(name, v, reason string) error {
	const maxShown = 64
	if len(v) > maxShown {
		v = v[:maxShown] + "..."
	}
	return fmt.Errorf("%w: %s: %s: %q", ErrMalformed, name, reason, v)
}
