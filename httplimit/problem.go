package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

// WithProblemDetails makes the flow answer a client that asks for problem
// details (application/problem+json in its Accept field, with a non-zero
// weight) with an RFC 9457 body when it refuses the request. The problem
// types are the IETF RateLimit draft's (up to version 10), under
// "https://iana.org/assignments/http-problem-types#": 429 quota-exceeded
// over a limit, 429 abnormal-usage-detected when locked out, 503
// temporary-reduced-capacity when the store failed under a layer's
// FailClosed, each naming the layers that refused in "violated-policies"
// (the binding one first); a deny-listed client gets 403 "about:blank",
// telling nothing of the entry. The rate-limit fields are set as for any
// denial. Every other client, and every other answer (400, 499, 500), gets
// the Responder's. docs/problem-details.md shows the bodies.
func WithProblemDetails() Option {
	return func(c *config) error {
		c.problems = true
		return nil
	}
}

// The problem types of the IETF RateLimit draft ("Problem Types", and the
// registrations of "IANA Considerations") and their registered titles.
const (
	problemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	problemAbnormalUsage   = "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"
	contentTypeProblem     = "application/problem+json" // RFC 9457, Section 6.1
)

// refuse answers a request the flow refused with d, the binding decision
// of layers (nil for a flow of one layer): with problem details when the
// flow gives them and the client asks, else by the Responder.
func (f *Flow) refuse(st *state, r keyfuncs.Request, w Response, d *core.Decision, layers []core.Decision) {
	st.in = inResponder
	if f.problems && wantsProblem(r) {
		_ = st.guard(w).Write(problemOf(d, layers))
		return
	}
	f.respond(r, st.guard(w), *d, nil)
}

// forbid answers a deny-listed request: with problem details when the
// flow gives them and the client asks, else by the Responder with the
// entry e as its error.
func (f *Flow) forbid(st *state, r keyfuncs.Request, w Response, e error) {
	if f.rep != nil {
		if banned, left := repBan(e); banned {
			f.forbidBanned(st, r, w, e, left)
			return
		}
		// A deny list's refusal is a signal. A reputation's own ban is not
		// scored again: it is what the signals earned, and a banned
		// client's flood must not cost a store write a request (on Redis,
		// a round trip).
		f.repSignal(st, r, reputation.DenyListed)
	}
	st.in = inResponder
	if f.problems && wantsProblem(r) {
		_ = st.guard(w).Write(http.StatusForbidden, contentTypeProblem,
			[]byte(`{"type":"about:blank","title":"Forbidden","status":403,"detail":"Access denied."}`))
		return
	}
	f.respond(r, st.guard(w), core.Decision{}, e)
}

// forbidBanned answers a request a reputation's ban e refuses, for left
// more: 403 with Retry-After, and the abnormal-usage-detected problem
// type when problem details are given and asked for.
func (f *Flow) forbidBanned(st *state, r keyfuncs.Request, w Response, e error, left time.Duration) {
	n := itoa(limits.RetryAfterSeconds(false, left))
	w.Set("Retry-After", n)
	st.in = inResponder
	if f.problems && wantsProblem(r) {
		_ = st.guard(w).Write(http.StatusForbidden, contentTypeProblem, []byte(`{"type":"`+problemAbnormalUsage+
			`","title":"Abnormal Usage Detected","status":403,"detail":"Refused for abnormal usage, retry after `+n+` seconds."}`))
		return
	}
	f.respond(r, st.guard(w), core.Decision{}, e)
}

// problemOf returns the status, content type and body of the problem
// details of a refusal d, the binding decision of layers.
func problemOf(d *core.Decision, layers []core.Decision) (int, string, []byte) {
	status, typ, title := http.StatusTooManyRequests, problemQuotaExceeded, "Quota Exceeded"
	n := limits.RetryAfterSeconds(d.Allowed, d.RetryAfter)
	detail := "Too many requests, retry after "
	switch {
	case d.Source == core.SourceFailMode:
		status, typ, title = http.StatusServiceUnavailable, problemReducedCapacity, "Temporary Reduced Capacity"
		detail = "Rate limiting is temporarily unavailable, retry after "
	case d.LockedOut:
		typ, title = problemAbnormalUsage, "Abnormal Usage Detected"
		detail = "Locked out after repeated denials, retry after "
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"type":`...)
	b = strconv.AppendQuote(b, typ)
	b = append(b, `,"title":`...)
	b = strconv.AppendQuote(b, title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"detail":"`...)
	b = append(b, detail...)
	b = strconv.AppendInt(b, n, 10)
	if n == 1 {
		b = append(b, ` second."`...)
	} else {
		b = append(b, ` seconds."`...)
	}
	b = append(b, `,"violated-policies":[`...)
	b = appendJSONString(b, d.Policy.Name)
	for i := range layers {
		if l := &layers[i]; !l.Allowed && l.Policy.Name != d.Policy.Name {
			b = append(b, ',')
			b = appendJSONString(b, l.Policy.Name)
		}
	}
	b = append(b, "]}"...)
	return status, contentTypeProblem, b
}

// appendJSONString appends s to b as a JSON string. A policy's name is
// [A-Za-z0-9._-] (core.Policy.Validate), which needs no escape; anything
// else is escaped all the same.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c >= 0x7f:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// maxAcceptMembers bounds the media ranges of the Accept field lines
// wantsProblem reads: a client that sends more asks for nothing it could
// not ask for in fewer.
const maxAcceptMembers = 64

// wantsProblem reports whether the request's Accept field (RFC 9110,
// Section 12.5.1) lists application/problem+json with a weight above 0.
// Ranges such as */* or application/* do not count: a client that did not
// name problem details gets the Responder's body, as before.
func wantsProblem(r keyfuncs.Request) bool {
	seen := 0
	for _, line := range r.HeaderValues("Accept") {
		for member := range strings.SplitSeq(line, ",") {
			if seen++; seen > maxAcceptMembers {
				return false
			}
			typ, params, _ := strings.Cut(member, ";")
			if !strings.EqualFold(strings.TrimSpace(typ), contentTypeProblem) {
				continue
			}
			return weightAboveZero(params)
		}
	}
	return false
}

// weightAboveZero reports whether the parameters of a media range give it
// a weight above 0: no "q" parameter is a weight of 1; "q=0", "q=0.0" and
// the like (RFC 9110, Section 12.4.2) are 0, and so is a malformed q.
func weightAboveZero(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		name, value, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		return err == nil && q > 0 && q <= 1
	}
	return true
}
