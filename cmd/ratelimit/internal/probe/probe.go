// Package probe sends a bounded, paced stream of requests to one URL and
// checks that the rate-limit fields of the answers agree with what the
// server did: when 429s began, whether a client told it had quota was then
// refused, whether Retry-After was long enough, whether Remaining went down
// as requests were admitted. It is the engine of `ratelimit probe`.
package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
)

// Hard caps, so that a typo in a flag cannot turn the probe into a flood.
const (
	// MaxRequests bounds the requests of the stream; the Retry-After
	// check adds one.
	MaxRequests = 10_000
	// MaxDuration bounds how long the stream lasts, whatever Requests and
	// Rate ask for.
	MaxDuration = 5 * time.Minute
	// MaxRate bounds the requests sent per second.
	MaxRate = 1000.0
	// MaxConcurrency bounds the requests in flight at once.
	MaxConcurrency = 64
	// MaxTimeout bounds the wait for one response.
	MaxTimeout = time.Minute
	// MaxRetryWait bounds the wait of the Retry-After check.
	MaxRetryWait = 2 * time.Minute
)

// maxBody is the most of a response body read (and discarded) so that the
// connection can be reused.
const maxBody = 1 << 20

// ErrInvalidConfig reports a Config that Run refuses; the errors Run returns
// for it wrap ErrInvalidConfig with the field at fault.
var ErrInvalidConfig = errors.New("probe: invalid configuration")

// Config is what to probe and how hard.
type Config struct {
	// URL is the only address requests are sent to: absolute, http or
	// https. Redirects are not followed.
	URL string
	// Method is the request method; "" means GET. Requests have no body.
	Method string
	// Header is sent with every request (an API key, say). A Host field
	// sets the request's Host.
	Header http.Header
	// Rate is the requests started per second, evenly spaced.
	Rate float64
	// Requests is how many requests the stream sends; 0 means as many as
	// Rate and Duration allow.
	Requests int
	// Duration is how long the stream lasts at most; 0 means until
	// Requests are sent. At least one of Requests and Duration is set.
	Duration time.Duration
	// Concurrency is the most requests in flight at once; 0 means 1. When
	// all are busy the next request waits, and is sent late.
	Concurrency int
	// Timeout bounds each request, response body included; 0 means 10s.
	Timeout time.Duration
	// RetryWait is the longest Retry-After that the probe waits out to
	// check it, once, after the stream; 0 skips the check.
	RetryWait time.Duration
	// Transport sends the requests; nil means a fresh http.Transport.
	Transport http.RoundTripper
	// Progress, when set, is called about once a second while the probe
	// runs, from a goroutine of its own.
	Progress func(Progress)
}

// Progress is how far a run has got.
type Progress struct {
	// Done is the number of requests answered or failed so far, of Total;
	// Failed, how many of them got no response.
	Done, Total, Failed int
	// Denied is how many of them got 429.
	Denied int
	// Elapsed is the time since the stream started.
	Elapsed time.Duration
	// Waiting, when positive, is the Retry-After being waited out before
	// the check's request.
	Waiting time.Duration
}

// Total returns how many requests the stream of c sends at most.
func (c Config) Total() int {
	n := c.Requests
	if c.Duration > 0 && c.Rate > 0 {
		byTime := int(math.Ceil(c.Duration.Seconds() * c.Rate))
		if n == 0 || byTime < n {
			n = byTime
		}
	}
	return n
}

// Validate reports whether Run accepts c.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...)
	}
	if _, err := parseURL(c.URL); err != nil {
		return bad("%v", err)
	}
	if c.Method != "" && !isToken(c.Method) {
		return bad("method %q is not an HTTP token", c.Method)
	}
	for name := range c.Header {
		if !isToken(name) {
			return bad("header name %q is not an HTTP token", name)
		}
	}
	switch {
	case math.IsNaN(c.Rate) || c.Rate <= 0 || c.Rate > MaxRate:
		return bad("rate %v: want more than 0 and at most %v requests a second", c.Rate, MaxRate)
	case c.Requests < 0 || c.Requests > MaxRequests:
		return bad("requests %d: want 1 to %d", c.Requests, MaxRequests)
	case c.Duration < 0 || c.Duration > MaxDuration:
		return bad("duration %v: want at most %v", c.Duration, MaxDuration)
	case c.Requests == 0 && c.Duration == 0:
		return bad("neither requests nor duration is set")
	case c.Total() > MaxRequests:
		return bad("rate %v for %v is %d requests, more than %d", c.Rate, c.Duration, c.Total(), MaxRequests)
	case c.Duration == 0 && float64(c.Total()-1)/c.Rate > MaxDuration.Seconds():
		return bad("%d requests at rate %v take longer than %v", c.Total(), c.Rate, MaxDuration)
	case c.Total() < 1:
		return bad("rate %v for %v sends no request", c.Rate, c.Duration)
	case c.Concurrency < 0 || c.Concurrency > MaxConcurrency:
		return bad("concurrency %d: want 1 to %d", c.Concurrency, MaxConcurrency)
	case c.Timeout < 0 || c.Timeout > MaxTimeout:
		return bad("timeout %v: want at most %v", c.Timeout, MaxTimeout)
	case c.RetryWait < 0 || c.RetryWait > MaxRetryWait:
		return bad("retry wait %v: want at most %v", c.RetryWait, MaxRetryWait)
	}
	return nil
}

// parseURL checks that s is an absolute http or https URL with a host.
func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("URL %q: %v", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("URL %q: want an http:// or https:// URL", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("URL %q has no host", s)
	}
	return u, nil
}

// isToken reports whether s is an RFC 9110 token, as methods and field
// names are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// Result is what happened to one request. Times are offsets from the start
// of the stream.
type Result struct {
	// Seq is the request's number, from 1, in the order sent.
	Seq int
	// Sent and Received bracket the request: sent, and its response read.
	Sent, Received time.Duration
	// Status is the response's status code; 0 when Err is set.
	Status int
	// Err is why no response came.
	Err string
	// Info is what the rate-limit fields said; ParseErr why they could
	// not be read (Info is then zero).
	Info     Info
	ParseErr string
}

// Info is what a response's rate-limit fields said of its binding layer
// (headers.Parse's first Decision), and which families it had.
type Info struct {
	Found      headers.Config
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	Policy     string // RateLimit's item name, or RateLimit-Policy's
	Quota      int64  // RateLimit-Policy's q
	Window     time.Duration
}

// infoOf returns the Info of a response's header h, d its binding layer's
// Decision as headers.Parse read it.
func infoOf(h http.Header, d core.Decision) Info {
	has := func(names ...string) bool {
		for _, n := range names {
			if len(h.Values(n)) > 0 {
				return true
			}
		}
		return false
	}
	return Info{
		Found: headers.Config{
			XRateLimit: has("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"),
			Draft6:     has("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset") || (has("RateLimit-Policy") && !has("RateLimit") && d.Policy.Name == ""),
			Structured: has("RateLimit") || (has("RateLimit-Policy") && d.Policy.Name != ""),
			RetryAfter: has("Retry-After"),
		},
		Limit: d.Limit, Remaining: d.Remaining, ResetAfter: d.ResetAfter, RetryAfter: d.RetryAfter,
		Policy: d.Policy.Name, Quota: d.Policy.Limit, Window: d.Policy.Window,
	}
}

// Run probes cfg.URL. It returns the report of what happened, or an error
// wrapping ErrInvalidConfig for a cfg that Validate refuses. When ctx ends
// the stream stops and the report covers what was sent, with Interrupted
// set.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Method == "" {
		cfg.Method = http.MethodGet
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	tr := cfg.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = cfg.Concurrency
		defer t.CloseIdleConnections()
		tr = t
	}
	s := &sender{
		cfg: cfg,
		client: &http.Client{
			Transport: tr,
			Timeout:   cfg.Timeout,
			// Only the URL the user gave: a redirect is an answer.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}

	total := cfg.Total()
	results, interrupted := s.stream(ctx, total)
	rep := newReport(cfg, results)
	rep.Interrupted = interrupted
	if !interrupted && cfg.RetryWait > 0 {
		s.checkRetryAfter(ctx, rep, results)
		rep.Interrupted = ctx.Err() != nil
	}
	rep.finish()
	return rep, nil
}

// sender sends the probe's requests.
type sender struct {
	cfg    Config
	client *http.Client
	start  time.Time

	done, denied, failed atomic.Int64
}

// stream sends total requests, paced at cfg.Rate, and returns their
// results in the order sent, and whether ctx ended it early.
func (s *sender) stream(ctx context.Context, total int) ([]Result, bool) {
	interval := time.Duration(float64(time.Second) / s.cfg.Rate)
	results := make([]Result, total)
	jobs := make(chan int)
	var wg sync.WaitGroup
	s.start = time.Now()
	for range s.cfg.Concurrency {
		wg.Go(func() {
			for i := range jobs {
				results[i] = s.send(ctx, i+1)
				if results[i].Status == http.StatusTooManyRequests {
					s.denied.Add(1)
				}
				if results[i].Err != "" {
					s.failed.Add(1)
				}
				s.done.Add(1)
			}
		})
	}
	stopProgress := s.progress(total)

	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	limit := MaxDuration
	if s.cfg.Duration > 0 {
		limit = s.cfg.Duration
	}
	n := 0
loop:
	for n < total {
		at := s.start.Add(time.Duration(n) * interval)
		if at.Sub(s.start) >= limit {
			break
		}
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				break loop
			case <-timer.C:
			}
		}
		select {
		case jobs <- n:
			n++
		case <-ctx.Done():
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	stopProgress()
	return results[:n], ctx.Err() != nil
}

// progress calls cfg.Progress every second until the returned func is
// called.
func (s *sender) progress(total int) (stop func()) {
	if s.cfg.Progress == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				s.cfg.Progress(Progress{
					Done: int(s.done.Load()), Total: total, Failed: int(s.failed.Load()), Denied: int(s.denied.Load()),
					Elapsed: time.Since(s.start),
				})
			}
		}
	})
	return func() { close(quit); wg.Wait() }
}

// send sends request number seq and reads its response.
func (s *sender) send(ctx context.Context, seq int) Result {
	r := Result{Seq: seq}
	req, err := http.NewRequestWithContext(ctx, s.cfg.Method, s.cfg.URL, nil)
	if err != nil { // Validate checked the URL and method
		r.Err = err.Error()
		return r
	}
	for name, vs := range s.cfg.Header {
		if http.CanonicalHeaderKey(name) == "Host" && len(vs) > 0 {
			req.Host = vs[0]
			continue
		}
		for _, v := range vs {
			req.Header.Add(name, v)
		}
	}
	r.Sent = time.Since(s.start)
	res, err := s.client.Do(req)
	if err != nil {
		r.Received = time.Since(s.start)
		r.Err = err.Error()
		return r
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxBody))
	_ = res.Body.Close()
	r.Received = time.Since(s.start)
	r.Status = res.StatusCode
	if layers, err := headers.Parse(res.Header); err != nil {
		r.ParseErr = err.Error()
	} else if len(layers) > 0 {
		r.Info = infoOf(res.Header, layers[0])
	}
	return r
}

// checkRetryAfter waits out the Retry-After of the stream's last request,
// when it got 429 and nothing admitted came after it, then sends the same
// request once more; a refusal means the Retry-After was too short.
func (s *sender) checkRetryAfter(ctx context.Context, rep *Report, results []Result) {
	if len(results) == 0 {
		return
	}
	last := results[len(results)-1]
	if last.Status != http.StatusTooManyRequests {
		return
	}
	rc := &RetryCheck{After: last.Seq}
	rep.RetryCheck = rc
	for _, r := range results {
		if r.Status != 0 && r.Status != http.StatusTooManyRequests && r.Received > last.Sent {
			rc.Note = fmt.Sprintf("not checked: request %d was admitted after request %d was sent", r.Seq, last.Seq)
			return
		}
	}
	var wait time.Duration
	switch {
	case last.Info.Found.RetryAfter: // an HTTP-date too, as its delay from Date
		wait = time.Until(s.start.Add(last.Received + last.Info.RetryAfter))
		rc.RetryAfter = Duration(last.Info.RetryAfter)
	default:
		rc.Note = "not checked: the 429 had no Retry-After"
		return
	}
	if time.Duration(rc.RetryAfter) > s.cfg.RetryWait {
		rc.Note = fmt.Sprintf("not checked: Retry-After %v is longer than the wait allowed (%v)", time.Duration(rc.RetryAfter), s.cfg.RetryWait)
		return
	}
	if wait > 0 {
		if s.cfg.Progress != nil {
			s.cfg.Progress(Progress{Done: len(results), Total: len(results), Denied: int(s.denied.Load()), Elapsed: time.Since(s.start), Waiting: wait})
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			rc.Note = "not checked: interrupted"
			return
		case <-t.C:
		}
	}
	r := s.send(ctx, len(results)+1)
	rc.Checked = true
	rc.Waited = Duration(r.Sent - last.Received)
	rc.Status = r.Status
	rc.Err = r.Err
	if r.Status == http.StatusTooManyRequests {
		rep.add(Finding{
			Kind:    KindRetryTooShort,
			Request: last.Seq,
			Message: fmt.Sprintf("request %d got 429 with Retry-After %v; waiting %v and sending it again still got 429",
				last.Seq, time.Duration(rc.RetryAfter), time.Duration(rc.Waited).Round(time.Millisecond)),
		})
	}
}
