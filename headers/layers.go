package headers

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// writeLayers is Writer.Write of a request that several layers decided,
// with the structured fields (see there), at time now (the zero Time
// means time.Now).
func writeLayers(h Setter, d *core.Decision, layers []core.Decision, now time.Time, cfg Config) {
	var fs fieldSet
	var space [512]byte
	single := cfg
	single.Structured, single.RetryAfter = false, false
	buf := fs.build(space[:0], d, now, single)
	buf = fs.addStructuredList(buf, d, layers)
	if cfg.RetryAfter && !d.Allowed {
		buf = fs.addInt(buf, wireRetryAfter, limits.RetryAfterSeconds(d.Allowed, d.RetryAfter))
	}
	if fs.n == 0 {
		return
	}
	emit(h, &fs, buf)
}

// addStructuredList appends RateLimit and RateLimit-Policy to fs and buf:
// an item for d, first, so that a client reading the first item (Parse)
// agrees with X-RateLimit-Remaining; then one for every decision of
// layers, in their order, but the first that has d's Policy.Name (d's
// own; when none has it, every one follows d's item). A name that a
// Structured Field string cannot hold, which a validated policy never
// has, is left out of both lists. RateLimit-Policy is left out when no
// decision carries a Policy with a rate.
func (fs *fieldSet) addStructuredList(buf []byte, d *core.Decision, layers []core.Decision) []byte {
	own := -1 // the index in layers of d's layer
	for i := range layers {
		if layers[i].Policy.Name == d.Policy.Name {
			own = i
			break
		}
	}
	start := len(buf)
	n := 0
	for j := -1; j < len(layers); j++ {
		if j >= 0 && j == own {
			continue
		}
		e := d
		if j >= 0 {
			e = &layers[j]
		}
		if !sfStringOK(e.Policy.Name) {
			continue
		}
		if n > 0 {
			buf = append(buf, ", "...)
		}
		n++
		buf = appendSFString(buf, e.Policy.Name)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, min(max(e.Remaining, 0), maxSFInteger), 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, ceilSeconds(e.ResetAfter), 10)
	}
	if n == 0 {
		return buf
	}
	fs.push(wireRateLimit, start, len(buf))
	start = len(buf)
	n = 0
	for j := -1; j < len(layers); j++ {
		if j >= 0 && j == own {
			continue
		}
		p := &d.Policy
		if j >= 0 {
			p = &layers[j].Policy
		}
		if !sfStringOK(p.Name) || p.Limit <= 0 || p.Window <= 0 {
			continue
		}
		if n > 0 {
			buf = append(buf, ", "...)
		}
		n++
		buf = appendSFString(buf, p.Name)
		buf = append(buf, ";q="...)
		buf = strconv.AppendInt(buf, min(p.Limit, maxSFInteger), 10)
		buf = append(buf, ";w="...)
		buf = strconv.AppendInt(buf, max(ceilSeconds(p.Window), 1), 10)
	}
	if n > 0 {
		fs.push(wireRateLimitPolicy, start, len(buf))
	}
	return buf
}

// Parse reads the rate-limit fields of a response, as a client does: one
// Decision per layer, the binding layer's first, as a Writer wrote them;
// none for a response with no rate-limit field. A layered API's client may
// send again only when every layer has room.
//
// A Decision has what the fields carry: Limit, Remaining, ResetAfter,
// RetryAfter, and the Policy's Name, Limit (RateLimit-Policy's q) and Window
// (its w); Allowed and the rest stay zero (the status says whether the
// request passed). The first has every family a Writer writes, whatever its
// Config; of several that carry a value, the most specific is kept
// (structured fields, then Draft6, then XRateLimit, whose Reset epoch is
// read as its delay from the response's Date).
//
// Counts and delays are decimal digits only: a sign, a fraction, over 15
// digits, a delay past a time.Duration, a field that may appear once
// appearing twice, and a structured field that breaks RFC 9651, lacks r or
// q, or has draft 07's dictionary syntax give an error wrapping ErrMalformed.
func Parse(h http.Header) ([]core.Decision, error) {
	layers, err := parseLayers(h)
	if err != nil || len(layers) == 0 {
		return nil, err
	}
	out := make([]core.Decision, len(layers))
	for i, f := range layers {
		out[i] = core.Decision{Limit: f.Limit, Remaining: f.Remaining, ResetAfter: f.ResetAfter, RetryAfter: f.RetryAfter,
			Policy: core.Policy{Name: f.Policy, Limit: f.Quota, Window: f.Window}}
	}
	return out, nil
}

// parseLayers is Parse, with the fields each layer's come from: the first
// item has every family's; each further one has Found.Structured, Policy
// (the item's name), Remaining (r), ResetAfter (t), and the Quota and
// Window of the first RateLimit-Policy item of the same name (zero without
// one).
func parseLayers(h http.Header) ([]fields, error) {
	first, err := parseFirst(h) // checks every field, the lists' items included
	if err != nil {
		return nil, err
	}
	vs := h.Values(canonRateLimit)
	if len(vs) == 0 {
		if first.Found == (Config{}) {
			return nil, nil
		}
		return []fields{first}, nil
	}
	v := strings.Join(vs, ", ")
	items, err := parseSFList(v)
	if err != nil {
		return nil, malformed(canonRateLimit, v, err.Error())
	}
	var policies []sfItem // the RateLimit-Policy items, which Parse checked
	if ps := h.Values(canonRateLimitPolicy); len(ps) > 0 {
		if policies, err = parseSFList(strings.Join(ps, ", ")); err != nil {
			return nil, malformed(canonRateLimitPolicy, strings.Join(ps, ", "), err.Error())
		}
	}
	out := make([]fields, 0, len(items))
	out = append(out, first)
	for _, it := range items[1:] {
		// Parse checked r and t of every item.
		r, _ := intParam(it, "r", true, maxSFInteger)
		t, _ := intParam(it, "t", false, maxDelaySeconds)
		info := fields{Found: Config{Structured: true}, Policy: it.val.str, Remaining: r, ResetAfter: time.Duration(t) * time.Second}
		for _, p := range policies {
			if (p.val.kind == sfString || p.val.kind == sfToken) && p.val.str == info.Policy {
				q, _ := intParam(p, "q", true, maxSFInteger)
				w, _ := intParam(p, "w", false, maxDelaySeconds)
				info.Quota, info.Window = q, time.Duration(w)*time.Second
				break
			}
		}
		out = append(out, info)
	}
	return out, nil
}
