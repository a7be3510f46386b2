package probe

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Kinds of Finding: the ways headers and behaviour can disagree.
const (
	// KindQuotaLie: a 429 came although an earlier response said quota was
	// left, more than the requests that could have used it in between.
	KindQuotaLie = "429-with-quota-left"
	// KindRetryTooShort: a request sent again after waiting Retry-After
	// was refused again.
	KindRetryTooShort = "retry-after-too-short"
	// KindRemainingStuck: Remaining did not go down as requests were
	// admitted, by more than any refill before the reported reset allows.
	KindRemainingStuck = "remaining-not-decreasing"
	// KindNoRetryInfo: a 429 said neither Retry-After nor when the quota
	// resets.
	KindNoRetryInfo = "429-without-retry-info"
	// KindMalformed: a rate-limit field could not be read.
	KindMalformed = "malformed-headers"
)

// Duration is a time.Duration that JSON writes in milliseconds.
type Duration time.Duration

// MarshalJSON writes d as a number of milliseconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(math.Round(float64(d)/1e3) / 1e3)
}

// String formats d as time.Duration does, rounded to 10µs.
func (d Duration) String() string {
	return time.Duration(d).Round(10 * time.Microsecond).String()
}

// Report is what a probe found.
type Report struct {
	URL         string  `json:"url"`
	Method      string  `json:"method"`
	Rate        float64 `json:"rate"`
	Concurrency int     `json:"concurrency"`
	// Requests is how many requests the stream sent (the Retry-After
	// check's request not included).
	Requests int `json:"requests"`
	// Elapsed is from the first request sent to the last response read.
	Elapsed Duration `json:"elapsed_ms"`
	// Statuses counts the stream's responses per status code.
	Statuses map[int]int `json:"statuses"`
	// Errors counts requests that got no response; FirstError is the
	// first one's.
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// FirstDenied is the first request (in the order sent) that got 429.
	FirstDenied *FirstDenied `json:"first_429,omitempty"`
	// Latency is over the stream's responses.
	Latency Latency `json:"latency_ms"`
	// Families lists the header families seen on any response.
	Families []string `json:"header_families"`
	// RetryCheck is the Retry-After check, when one was due.
	RetryCheck *RetryCheck `json:"retry_check,omitempty"`
	// Disagreements are the ways headers and behaviour disagreed; empty
	// when they agree.
	Disagreements []Finding `json:"disagreements"`
	// Notes are remarks that are not disagreements.
	Notes []string `json:"notes,omitempty"`
	// Interrupted is set when the run was cut short.
	Interrupted bool `json:"interrupted,omitempty"`

	results []Result
}

// FirstDenied is when 429s began.
type FirstDenied struct {
	// Request is its number, from 1, in the order sent.
	Request int `json:"request"`
	// Elapsed is when it was sent, from the start of the stream.
	Elapsed Duration `json:"elapsed_ms"`
}

// Latency are percentiles of the time from sending a request to reading
// its response, nearest rank.
type Latency struct {
	P50 Duration `json:"p50"`
	P90 Duration `json:"p90"`
	P99 Duration `json:"p99"`
	Max Duration `json:"max"`
}

// RetryCheck is the check of one Retry-After: wait as told, send again.
type RetryCheck struct {
	// After is the request whose 429 and Retry-After were checked.
	After int `json:"after_request"`
	// RetryAfter is the delay it said.
	RetryAfter Duration `json:"retry_after_ms"`
	// Checked tells whether the request was sent again; Note says why not.
	Checked bool   `json:"checked"`
	Note    string `json:"note,omitempty"`
	// Waited is from that 429's arrival to the new request.
	Waited Duration `json:"waited_ms,omitempty"`
	// Status is the new request's status, Err why it got none.
	Status int    `json:"status,omitempty"`
	Err    string `json:"error,omitempty"`
}

// Finding is one kind of disagreement, with its first occurrence.
type Finding struct {
	// Kind is one of the Kind constants.
	Kind string `json:"kind"`
	// Request is the first request it was seen on.
	Request int `json:"request"`
	// Count is how many times it was seen.
	Count int `json:"count"`
	// Message says what happened the first time.
	Message string `json:"message"`
}

// newReport summarizes the stream's results and checks them.
func newReport(cfg Config, results []Result) *Report {
	rep := &Report{
		URL: cfg.URL, Method: cfg.Method, Rate: cfg.Rate, Concurrency: cfg.Concurrency,
		Requests: len(results), Statuses: map[int]int{}, Disagreements: []Finding{},
		results: results,
	}
	var lat []time.Duration
	var x, d6, sf, ra bool
	for _, r := range results {
		if r.Received > time.Duration(rep.Elapsed) {
			rep.Elapsed = Duration(r.Received)
		}
		if r.Err != "" {
			if rep.Errors == 0 {
				rep.FirstError = r.Err
			}
			rep.Errors++
			continue
		}
		rep.Statuses[r.Status]++
		lat = append(lat, r.Received-r.Sent)
		if r.Status == http.StatusTooManyRequests && rep.FirstDenied == nil {
			rep.FirstDenied = &FirstDenied{Request: r.Seq, Elapsed: Duration(r.Sent)}
		}
		f := r.Info.Found
		x, d6, sf, ra = x || f.XRateLimit, d6 || f.Draft6, sf || f.Structured, ra || f.RetryAfter
	}
	for _, fam := range []struct {
		seen bool
		name string
	}{{x, "X-RateLimit"}, {d6, "RateLimit (draft 6)"}, {sf, "RateLimit structured (draft 10)"}, {ra, "Retry-After"}} {
		if fam.seen {
			rep.Families = append(rep.Families, fam.name)
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		rank := func(p float64) Duration {
			i := int(math.Ceil(p*float64(len(lat)))) - 1
			return Duration(lat[max(i, 0)])
		}
		rep.Latency = Latency{P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: Duration(lat[len(lat)-1])}
	}
	rep.checkFields()
	rep.checkQuotaLies()
	rep.checkRemaining()
	return rep
}

// finish adds the notes that depend on the whole run.
func (rep *Report) finish() {
	switch {
	case rep.Requests == 0:
	case rep.Errors == rep.Requests:
		rep.Notes = append(rep.Notes, "no request got a response")
	case len(rep.Families) == 0 && rep.FirstDenied == nil:
		rep.Notes = append(rep.Notes, "no rate-limit field and no 429: the URL does not look rate-limited")
	case rep.FirstDenied == nil:
		rep.Notes = append(rep.Notes, "no 429: the limit was not reached (raise --rate or --requests to reach it)")
	}
}

// add records f, or counts it when its kind was already seen.
func (rep *Report) add(f Finding) {
	for i := range rep.Disagreements {
		if rep.Disagreements[i].Kind == f.Kind {
			rep.Disagreements[i].Count++
			return
		}
	}
	f.Count = 1
	rep.Disagreements = append(rep.Disagreements, f)
}

// checkFields finds malformed rate-limit fields, and 429s that do not say
// when to come back.
func (rep *Report) checkFields() {
	for _, r := range rep.results {
		switch {
		case r.Err != "":
		case r.ParseErr != "":
			rep.add(Finding{Kind: KindMalformed, Request: r.Seq,
				Message: fmt.Sprintf("request %d (status %d): %s", r.Seq, r.Status, r.ParseErr)})
		case r.Status == http.StatusTooManyRequests:
			f := r.Info.Found
			if !f.RetryAfter && r.Info.ResetAfter == 0 {
				rep.add(Finding{Kind: KindNoRetryInfo, Request: r.Seq,
					Message: fmt.Sprintf("request %d got 429 with no Retry-After and no reset field", r.Seq)})
			}
		}
	}
}

// hasRemaining reports whether r's fields told how many requests remain.
func hasRemaining(r Result) bool {
	f := r.Info.Found
	return r.Err == "" && r.ParseErr == "" && (f.XRateLimit || f.Draft6 || f.Structured)
}

// checkQuotaLies finds 429s that came while the latest response before
// them said more requests remained than could have been used in between.
// Time passing only gives quota back, under every algorithm, so no reset
// can excuse such a 429. With requests in flight at once the order in which
// the server saw them is unknown: every request whose flight overlaps the
// interval is counted as having used quota.
func (rep *Report) checkQuotaLies() {
	rs := rep.results
	for _, j := range rs {
		if j.Status != http.StatusTooManyRequests {
			continue
		}
		var anchor *Result // the latest response read before j was sent
		for k := range rs {
			i := &rs[k]
			if i.Seq != j.Seq && hasRemaining(*i) && i.Received < j.Sent && (anchor == nil || i.Received > anchor.Received) {
				anchor = i
			}
		}
		if anchor == nil || anchor.Info.Remaining == 0 {
			continue
		}
		between := 0
		for _, k := range rs {
			if k.Seq != j.Seq && k.Seq != anchor.Seq && k.Received > anchor.Sent && k.Sent < j.Received {
				between++
			}
		}
		if anchor.Info.Remaining > int64(between) {
			rep.add(Finding{Kind: KindQuotaLie, Request: j.Seq, Message: fmt.Sprintf(
				"request %d said Remaining %d; %d request(s) could have used quota since, yet request %d got 429",
				anchor.Seq, anchor.Info.Remaining, between, j.Seq)})
		}
	}
}

// checkRemaining finds admitted requests whose Remaining did not go down.
// From an anchor response i whose quota is whole again only after more
// than a second (so that the rounding of the reset to whole seconds leaves
// a lower bound of it), Remaining at a later admitted request j, before
// that bound, is at most
//
//	Remaining(i) - admitted(i, j) + floor(refill)
//
// where admitted(i, j) counts the requests admitted surely after i and
// before j (j's own cost and the fraction hidden by Remaining's rounding
// cancel out) and refill is the time between them at the fastest rate that
// could make the quota whole by the reset: (Limit - Remaining(i)) over
// (reset - 1s). A fixed window refills nothing before its reset; a bucket
// refills at its rate, which is below that bound. The reset is the
// relative one (RateLimit-Reset or the structured t): X-RateLimit-Reset
// alone, an instant on the server's clock, is not trusted for this.
func (rep *Report) checkRemaining() {
	rs := rep.results
	var anchor *Result
	var anchorReset time.Duration // lower bound of the anchor's reset
	var anchorRate float64        // requests per second
	for k := range rs {
		j := &rs[k]
		if j.Status == http.StatusTooManyRequests || j.Status == 0 || !hasRemaining(*j) {
			continue
		}
		if anchor != nil {
			if j.Sent <= anchor.Received {
				continue // in flight with the anchor: order unknown
			}
			if j.Received >= anchorReset {
				anchor = nil
			} else {
				admitted := 0
				for _, b := range rs {
					if b.Status != 0 && b.Status != http.StatusTooManyRequests && b.Sent > anchor.Received && b.Received < j.Sent {
						admitted++
					}
				}
				refill := int64(math.Floor((j.Received - anchor.Sent).Seconds() * anchorRate))
				bound := anchor.Info.Remaining - int64(admitted) + refill
				if j.Info.Remaining <= bound {
					continue
				}
				rep.add(Finding{Kind: KindRemainingStuck, Request: j.Seq, Message: fmt.Sprintf(
					"request %d said Remaining %d; %d request(s) were admitted since, the last one, request %d, saying Remaining %d (at most %d could be left before the reset)",
					anchor.Seq, anchor.Info.Remaining, admitted+1, j.Seq, j.Info.Remaining, bound)})
				anchor = nil
			}
		}
		limit := j.Info.Limit
		if limit == 0 {
			limit = j.Info.Quota
		}
		if reset := j.Info.ResetAfter; reset > time.Second && limit >= j.Info.Remaining {
			anchor = j
			anchorReset = j.Sent + reset - time.Second
			anchorRate = float64(limit-j.Info.Remaining) / (reset - time.Second).Seconds()
		}
	}
}

// Failed reports whether headers and behaviour disagreed.
func (rep *Report) Failed() bool { return len(rep.Disagreements) > 0 }

// WriteText writes the report for a person.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "probe: %s %s\n", rep.Method, rep.URL)
	fmt.Fprintf(w, "sent: %d requests in %v (rate %g/s, concurrency %d)\n", rep.Requests, rep.Elapsed, rep.Rate, rep.Concurrency)
	codes := make([]int, 0, len(rep.Statuses))
	for c := range rep.Statuses {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	parts := make([]string, 0, len(codes)+1)
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d: %d", c, rep.Statuses[c]))
	}
	if rep.Errors > 0 {
		parts = append(parts, fmt.Sprintf("no response: %d (first: %s)", rep.Errors, rep.FirstError))
	}
	fmt.Fprintf(w, "statuses: %s\n", strings.Join(parts, ", "))
	if fd := rep.FirstDenied; fd != nil {
		fmt.Fprintf(w, "first 429: request %d, sent after %v\n", fd.Request, fd.Elapsed)
	} else {
		fmt.Fprintln(w, "first 429: none")
	}
	l := rep.Latency
	fmt.Fprintf(w, "latency: p50 %v, p90 %v, p99 %v, max %v\n", l.P50, l.P90, l.P99, l.Max)
	fams := "none"
	if len(rep.Families) > 0 {
		fams = strings.Join(rep.Families, ", ")
	}
	fmt.Fprintf(w, "rate-limit fields: %s\n", fams)
	if rc := rep.RetryCheck; rc != nil {
		switch {
		case !rc.Checked:
			fmt.Fprintf(w, "Retry-After check: %s\n", rc.Note)
		case rc.Err != "":
			fmt.Fprintf(w, "Retry-After check: waited %v after request %d (Retry-After %v), then no response: %s\n", rc.Waited, rc.After, rc.RetryAfter, rc.Err)
		default:
			fmt.Fprintf(w, "Retry-After check: waited %v after request %d (Retry-After %v), then got %d\n", rc.Waited, rc.After, rc.RetryAfter, rc.Status)
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if rep.Interrupted {
		fmt.Fprintln(w, "note: interrupted; the report covers the requests sent")
	}
	if !rep.Failed() && rep.Requests > rep.Errors {
		fmt.Fprintln(w, "verdict: OK, the rate-limit fields agree with what happened")
		return
	}
	if !rep.Failed() {
		fmt.Fprintln(w, "verdict: nothing to check, no response")
		return
	}
	fmt.Fprintf(w, "verdict: FAIL, %d kind(s) of disagreement between the rate-limit fields and what happened:\n", len(rep.Disagreements))
	for _, f := range rep.Disagreements {
		fmt.Fprintf(w, "  %s (%d time(s), first at request %d): %s\n", f.Kind, f.Count, f.Request, f.Message)
	}
}
