package headers

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/apigate/ratelimit/core"
)

// WriteLayers sets the fields of the families cfg selects from v, the
// verdict of a layered decision (core.Limiter.AllowLayers) made at time now
// (the zero Time means time.Now):
//
//   - X-RateLimit-* and the draft-6 RateLimit-* fields describe the binding
//     layer, v.Decision: the one that denied, or, when every layer
//     admitted, the one closest to denying, so that Remaining is the least
//     any layer has left;
//   - the draft-10 RateLimit and RateLimit-Policy fields list every layer
//     that applied, one item each, named by the layer: the binding layer
//     first (so that Parse, which reads the first item, agrees with
//     X-RateLimit-Remaining), then the others in v.Decisions' order:
//     RateLimit: "ip";r=12;t=42, "global";r=999990;t=42;
//   - Retry-After, on a denied verdict, is v.RetryAfter: the time at which
//     every layer would admit the request.
//
// As Write, WriteLayers writes nothing for a verdict the FailMode allowed,
// nor for one with no layer (v.Binding < 0). A verdict of one layer gets
// exactly Write's fields. A layer whose name a Structured Field string
// cannot hold, which a validated layer never has, is left out of the lists.
func WriteLayers(h Setter, v *core.Verdict, now time.Time, cfg Config) {
	if v == nil || v.Binding < 0 {
		return
	}
	d := v.Decision
	if d.Allowed && d.Source == core.SourceFailMode {
		return
	}
	if len(v.Decisions) <= 1 || !cfg.Structured {
		Write(h, d, now, cfg)
		return
	}
	var fs fieldSet
	var space [512]byte
	single := cfg
	single.Structured, single.RetryAfter = false, false
	buf := fs.build(space[:0], d, now, single)
	buf = fs.addStructuredList(buf, v.Decisions, v.Binding)
	if cfg.RetryAfter && !d.Allowed {
		buf = fs.addInt(buf, wireRetryAfter, RetryAfterSeconds(d))
	}
	if fs.n == 0 {
		return
	}
	emit(h, &fs, buf)
}

// addStructuredList appends RateLimit and RateLimit-Policy listing every
// decision of ds, ds[first] first, to fs and buf. RateLimit-Policy is left
// out when no decision carries a Policy with a rate.
func (fs *fieldSet) addStructuredList(buf []byte, ds []core.Decision, first int) []byte {
	if first < 0 || first >= len(ds) {
		first = 0
	}
	start := len(buf)
	n := 0
	for j := range ds {
		d := &ds[order(j, first)]
		if !sfStringOK(d.Policy.Name) {
			continue
		}
		if n > 0 {
			buf = append(buf, ", "...)
		}
		n++
		buf = appendSFString(buf, d.Policy.Name)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, min(max(d.Remaining, 0), maxSFInteger), 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, ceilSeconds(d.ResetAfter), 10)
	}
	if n == 0 {
		return buf
	}
	fs.push(wireRateLimit, start, len(buf))
	start = len(buf)
	n = 0
	for j := range ds {
		p := &ds[order(j, first)].Policy
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

// order returns the index of the j-th item of a list that puts first
// first and keeps the others in their order.
func order(j, first int) int {
	switch {
	case j == 0:
		return first
	case j <= first:
		return j - 1
	}
	return j
}

// LayerInfo is one item of the RateLimit list of a layered response
// (WriteLayers), joined with the RateLimit-Policy item of the same name.
type LayerInfo struct {
	// Name is the layer's name.
	Name string
	// Remaining is the item's r, and ResetAfter its t.
	Remaining  int64
	ResetAfter time.Duration
	// Quota and Window are the q and w of the RateLimit-Policy item of the
	// same name; zero without one.
	Quota  int64
	Window time.Duration
}

// ParseLayers reads every item of the RateLimit and RateLimit-Policy
// fields of a response, in the order of RateLimit, as a client of a
// layered API does: it may send again only when every layer has room. A
// response without RateLimit gives no item; a malformed field an error
// wrapping ErrMalformed, as Parse reports it.
func ParseLayers(h http.Header) ([]LayerInfo, error) {
	vs := h.Values(RateLimit)
	if len(vs) == 0 {
		return nil, nil
	}
	v := strings.Join(vs, ", ")
	items, err := parseSFList(v)
	if err != nil {
		return nil, malformed(RateLimit, v, err.Error())
	}
	out := make([]LayerInfo, 0, len(items))
	for _, it := range items {
		if it.val.kind != sfString && it.val.kind != sfToken {
			return nil, malformed(RateLimit, v, "an item is not a policy name")
		}
		r, err := intParam(it, "r", true, maxSFInteger)
		if err != nil {
			return nil, malformed(RateLimit, v, err.Error())
		}
		t, err := intParam(it, "t", false, maxDelaySeconds)
		if err != nil {
			return nil, malformed(RateLimit, v, err.Error())
		}
		out = append(out, LayerInfo{Name: it.val.str, Remaining: r, ResetAfter: time.Duration(t) * time.Second})
	}
	if ps := h.Values(RateLimitPolicy); len(ps) > 0 {
		pv := strings.Join(ps, ", ")
		items, err := parseSFList(pv)
		if err != nil {
			return nil, malformed(RateLimitPolicy, pv, err.Error())
		}
		for _, it := range items {
			if it.val.kind != sfString && it.val.kind != sfToken {
				continue
			}
			q, err := intParam(it, "q", true, maxSFInteger)
			if err != nil {
				return nil, malformed(RateLimitPolicy, pv, err.Error())
			}
			w, err := intParam(it, "w", false, maxDelaySeconds)
			if err != nil {
				return nil, malformed(RateLimitPolicy, pv, err.Error())
			}
			for i := range out {
				if out[i].Name == it.val.str && out[i].Quota == 0 {
					out[i].Quota, out[i].Window = q, time.Duration(w)*time.Second
				}
			}
		}
	}
	return out, nil
}
