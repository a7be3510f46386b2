package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	chilimit "github.com/apigate/ratelimit/adapters/chi"
	ginlimit "github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
)

// report is the JSON report, as a CI job reads it.
type report struct {
	Requests    int            `json:"requests"`
	Statuses    map[string]int `json:"statuses"`
	Errors      int            `json:"errors"`
	FirstDenied *struct {
		Request   int     `json:"request"`
		ElapsedMS float64 `json:"elapsed_ms"`
	} `json:"first_429"`
	Latency struct {
		P50, P90, P99, Max float64
	} `json:"latency_ms"`
	Families   []string `json:"header_families"`
	RetryCheck *struct {
		After   int    `json:"after_request"`
		Checked bool   `json:"checked"`
		Status  int    `json:"status"`
		Note    string `json:"note"`
	} `json:"retry_check"`
	Disagreements []struct {
		Kind    string `json:"kind"`
		Request int    `json:"request"`
		Count   int    `json:"count"`
		Message string `json:"message"`
	} `json:"disagreements"`
}

// probeJSON runs `ratelimit probe --json args...` and returns its exit
// code, its decoded report and its stderr.
func probeJSON(t *testing.T, args ...string) (int, report, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(30*time.Second))
	defer cancel()
	code := runProbe(ctx, append([]string{"--json", "--quiet"}, args...), &stdout, &stderr)
	var rep report
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), "the JSON report; stderr: %s", stderr.String())
	return code, rep, stderr.String()
}

// newLimiter returns a limiter of p over a fresh memory store, on the real
// clock: the probe runs in real time.
func newFlow(t *testing.T, p core.Policy, opts ...httplimit.Option) *httplimit.Flow {
	t.Helper()
	store, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	f, err := httplimit.New(store, []httplimit.Layer{{Policy: p}}, opts...)
	require.NoError(t, err)
	return f
}

// serve serves h on a free loopback port.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestProbeExamples probes the demo API's wiring, one limiter on a route,
// in two frameworks over loopback sockets: 429s begin right after the
// burst, the Retry-After of the last one is waited out and holds, and the
// fields agree with what happened (exit 0).
//
// The limits refill once in 2s, and the 12 requests take a quarter of a
// second: the counts are exact on a machine eight times slower than that.
func TestProbeExamples(t *testing.T) {
	allFields := headers.Config{XRateLimit: true, Draft6: true, Structured: true, RetryAfter: true}
	for _, tc := range []struct {
		name     string
		url      func(t *testing.T) string
		families []string
	}{
		{
			// A token bucket of 5, refilled at 1 in 2 seconds, every
			// family of fields, draft 10's structured ones included.
			name: "chi/TokenBucket",
			url: func(t *testing.T) string {
				l := newFlow(t, core.Policy{Name: "global", Algorithm: core.TokenBucket, Limit: 30, Window: time.Minute, Burst: 5}, httplimit.WithHeaders(allFields))
				r := chi.NewRouter()
				r.Use(chilimit.New(l))
				r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hello from chi")) })
				return serve(t, r) + "/"
			},
			families: []string{"X-RateLimit", "RateLimit (draft 6)", "RateLimit structured (draft 10)", "Retry-After"},
		},
		{
			// At most 5 in any 2 seconds, the adapter's default fields.
			name: "gin/SlidingWindowLog",
			url: func(t *testing.T) string {
				gin.SetMode(gin.ReleaseMode)
				l := newFlow(t, core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 5, Window: 2 * time.Second})
				r := gin.New()
				r.POST("/login", ginlimit.New(l), func(c *gin.Context) { c.String(http.StatusOK, "logged in") })
				return serve(t, r) + "/login"
			},
			families: []string{"X-RateLimit", "RateLimit (draft 6)", "Retry-After"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := tc.url(t)
			method := http.MethodGet
			if tc.name[:3] == "gin" {
				method = http.MethodPost
			}
			code, rep, stderr := probeJSON(t, "--rate", "50", "--requests", "12", "--concurrency", "1", "--method", method, "--max-wait", "3s", url)
			require.Equal(t, 0, code, "exit code; stderr: %s; report: %+v", stderr, rep)
			assert.Empty(t, rep.Disagreements)
			assert.Equal(t, 12, rep.Requests)
			assert.Equal(t, map[string]int{"200": 5, "429": 7}, rep.Statuses)
			require.NotNil(t, rep.FirstDenied, "429s began")
			assert.Equal(t, 6, rep.FirstDenied.Request, "the first 429 comes right after the burst of 5")
			// Paced, request 6 is not sent before 100ms in, at 50 a
			// second; how much later a busy machine sends it is not the
			// probe's to promise.
			assert.GreaterOrEqual(t, rep.FirstDenied.ElapsedMS, 100.0, "request 6 is sent 100ms in, at 50 a second")
			assert.Positive(t, rep.Latency.P50)
			assert.LessOrEqual(t, rep.Latency.P50, rep.Latency.P90)
			assert.LessOrEqual(t, rep.Latency.P99, rep.Latency.Max)
			assert.Equal(t, tc.families, rep.Families)
			require.NotNil(t, rep.RetryCheck, "the last request got 429: its Retry-After is checked")
			assert.True(t, rep.RetryCheck.Checked, "note: %s", rep.RetryCheck.Note)
			assert.Equal(t, 12, rep.RetryCheck.After)
			assert.Equal(t, http.StatusOK, rep.RetryCheck.Status, "after Retry-After, the request passes")
		})
	}
}

// TestProbeExampleConcurrent probes with requests in flight at once: the
// order the server saw them in is unknown, and the checks must not take
// that for a disagreement.
func TestProbeExampleConcurrent(t *testing.T) {
	t.Parallel()
	l := newFlow(t, core.Policy{Name: "global", Algorithm: core.FixedWindow, Limit: 10, Window: time.Hour})
	r := chi.NewRouter()
	r.Use(chilimit.New(l))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	code, rep, stderr := probeJSON(t, "--rate", "200", "--requests", "40", "--concurrency", "8", "--max-wait", "0", serve(t, r)+"/")
	require.Equal(t, 0, code, "exit code; stderr: %s; report: %+v", stderr, rep)
	assert.Empty(t, rep.Disagreements)
	assert.Equal(t, map[string]int{"200": 10, "429": 30}, rep.Statuses)
	require.NotNil(t, rep.FirstDenied)
	// FirstDenied counts in the order sent; with 8 workers a request sent
	// early may be decided after later ones, so only the bounds are sure.
	assert.GreaterOrEqual(t, rep.FirstDenied.Request, 1)
	assert.LessOrEqual(t, rep.FirstDenied.Request, 40)
	assert.Nil(t, rep.RetryCheck, "--max-wait 0: no check")
}

// liar says Remaining 5 on the first admitted responses, then refuses every
// request with a Retry-After of 1s that it does not keep.
func liar(admitted int64) http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("X-RateLimit-Limit", "10")
		h.Set("RateLimit-Reset", "60")
		if n.Add(1) <= admitted {
			h.Set("X-RateLimit-Remaining", "5")
			_, _ = w.Write([]byte("ok"))
			return
		}
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	})
}

// TestProbeLiar probes a server whose fields lie: it fails (exit 1) and
// names each disagreement.
func TestProbeLiar(t *testing.T) {
	t.Parallel()
	code, rep, stderr := probeJSON(t, "--rate", "50", "--requests", "8", "--concurrency", "1", "--max-wait", "3s", serve(t, liar(4))+"/")
	require.Equal(t, 1, code, "exit code; stderr: %s", stderr)
	kinds := map[string]int{}
	for _, d := range rep.Disagreements {
		kinds[d.Kind] = d.Request
		assert.NotEmpty(t, d.Message)
	}
	assert.Equal(t, map[string]int{
		"remaining-not-decreasing": 3, // Remaining 5 at requests 1, 2 and 3
		"429-with-quota-left":      5, // request 4 said 5 remain
		"retry-after-too-short":    8, // waited 1s after the last 429: 429 again
	}, kinds)
	require.NotNil(t, rep.RetryCheck)
	assert.True(t, rep.RetryCheck.Checked)
	assert.Equal(t, http.StatusTooManyRequests, rep.RetryCheck.Status)
}

// TestProbeLiarText checks that the text report names the disagreement.
func TestProbeLiarText(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := runProbe(context.Background(), []string{"--rate", "50", "--requests", "6", "--concurrency", "1", "--max-wait", "0", "--quiet", serve(t, liar(4)) + "/"}, &stdout, &stderr)
	require.Equal(t, 1, code, "stderr: %s", stderr.String())
	out := stdout.String()
	assert.Contains(t, out, "first 429: request 5")
	assert.Contains(t, out, "statuses: 200: 4, 429: 2")
	assert.Contains(t, out, "verdict: FAIL")
	assert.Contains(t, out, "429-with-quota-left (1 time(s), first at request 5): request 4 said Remaining 5")
}

// TestProbeBadFields probes a server whose fields cannot be read and
// whose 429 says nothing of when to come back.
func TestProbeBadFields(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("X-RateLimit-Remaining", "-1")
			return
		}
		w.WriteHeader(http.StatusTooManyRequests)
	})) + "/"
	code, rep, _ := probeJSON(t, "--rate", "50", "--requests", "3", "--concurrency", "1", url)
	require.Equal(t, 1, code)
	kinds := map[string]int{}
	for _, d := range rep.Disagreements {
		kinds[d.Kind] = d.Count
	}
	assert.Equal(t, map[string]int{"malformed-headers": 1, "429-without-retry-info": 2}, kinds)
	require.NotNil(t, rep.RetryCheck)
	assert.False(t, rep.RetryCheck.Checked)
	assert.Contains(t, rep.RetryCheck.Note, "no Retry-After")
}

// TestProbeOnlyTheURL checks that a redirect is reported, not followed.
func TestProbeOnlyTheURL(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int64
	other := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	url := serve(t, http.RedirectHandler(other, http.StatusFound))
	code, rep, _ := probeJSON(t, "--rate", "100", "--requests", "3", url)
	assert.Equal(t, 0, code)
	assert.Equal(t, map[string]int{"302": 3}, rep.Statuses)
	assert.Zero(t, elsewhere.Load(), "requests sent to the redirect's target")
}

// TestProbeHeaders checks that --header reaches the server.
func TestProbeHeaders(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	url := serve(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got.Store(r.Header.Get("X-Api-Key")) }))
	code, _, _ := probeJSON(t, "--requests", "1", "--header", "X-API-Key: k1", url)
	assert.Equal(t, 0, code)
	assert.Equal(t, "k1", got.Load())
}

// TestProbeUsage checks --help and the errors of bad flags and URLs, none
// of which sends a request.
func TestProbeUsage(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	url := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))

	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runProbe(context.Background(), []string{"--help"}, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "Examples:")
	assert.Contains(t, stdout.String(), "-max-wait")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no URL given"},
		{[]string{url, url}, "one URL only"},
		{[]string{"ftp://127.0.0.1/"}, "want an http:// or https:// URL"},
		{[]string{"http://"}, "has no host"},
		{[]string{"127.0.0.1:8080"}, "URL"},
		{[]string{"--rate", "0", url}, "rate 0"},
		{[]string{"--rate", "NaN", url}, "rate NaN"},
		{[]string{"--rate", "abc", url}, "invalid value"},
		{[]string{"--rate", "1001", url}, "rate 1001"},
		{[]string{"--requests", "10001", url}, "requests 10001"},
		{[]string{"--requests", "-1", url}, "requests -1"},
		{[]string{"--duration", "6m", url}, "duration 6m0s"},
		{[]string{"--rate", "1000", "--duration", "1m", url}, "60000 requests, more than 10000"},
		{[]string{"--rate", "0.01", "--requests", "10", url}, "take longer than 5m0s"},
		{[]string{"--concurrency", "65", url}, "concurrency 65"},
		{[]string{"--method", "GE T", url}, "method"},
		{[]string{"--header", "no colon", url}, "want \"Name: value\""},
		{[]string{"--header", "Bad Name: v", url}, "header name"},
		{[]string{"--max-wait", "1h", url}, "retry wait 1h0m0s"},
		{[]string{"--no-such-flag", url}, "no-such-flag"},
	} {
		stdout.Reset()
		stderr.Reset()
		code := runProbe(context.Background(), tc.args, &stdout, &stderr)
		assert.Equal(t, 2, code, "%q", tc.args)
		assert.Contains(t, stderr.String(), tc.want, "%q", tc.args)
		assert.Empty(t, stdout.String(), "%q", tc.args)
	}
	assert.Zero(t, hits.Load(), "requests sent despite bad flags")
}

// TestProbeNoServer: nothing listens, every request fails: exit 2.
func TestProbeNoServer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // the port is free again: connections are refused
	code, rep, stderr := probeJSON(t, "--rate", "100", "--requests", "2", url)
	assert.Equal(t, 2, code)
	assert.Equal(t, 2, rep.Errors)
	assert.Contains(t, stderr, "no response from")
}

// TestProbeInterrupted: a cancelled context stops the stream at once.
func TestProbeInterrupted(t *testing.T) {
	t.Parallel()
	url := serve(t, http.NotFoundHandler())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := runProbe(ctx, []string{"--rate", "10", "--duration", "1m", "--quiet", url}, &stdout, &stderr)
	// Scaled for a busy machine, and kept well below the minute it must not run.
	assert.Less(t, time.Since(start), min(testwait.D(5*time.Second), 30*time.Second), "the probe stopped when told")
	assert.Equal(t, 2, code)
	assert.Contains(t, stdout.String(), "interrupted")
	assert.Contains(t, stderr.String(), "interrupted")
}

// TestProbeLayeredLimits probes two stacked limiters on /users/{id}, as
// the demo API was wired before layers (TestProbeLayersAgree has the
// layers): the global limit and, inside it, the route's. The route's limiter writes its
// fields over the global one's, so a client is told Remaining 29 by the
// route's limit while the global one is exhausted: the probe says so.
func TestProbeLayeredLimits(t *testing.T) {
	t.Parallel()
	global := newFlow(t, core.Policy{Name: "global", Algorithm: core.TokenBucket, Limit: 60, Window: time.Minute, Burst: 3})
	users := newFlow(t, core.Policy{Name: "users", Algorithm: core.FixedWindow, Limit: 30, Window: time.Hour})
	r := chi.NewRouter()
	r.Use(chilimit.New(global))
	r.With(chilimit.New(users)).Get("/users/{id}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) })
	code, rep, _ := probeJSON(t, "--rate", "50", "--requests", "5", "--concurrency", "1", "--max-wait", "0", serve(t, r)+"/users/1")
	require.Equal(t, 1, code)
	require.Len(t, rep.Disagreements, 1)
	assert.Equal(t, "429-with-quota-left", rep.Disagreements[0].Kind)
	assert.Equal(t, 4, rep.Disagreements[0].Request)
	assert.Contains(t, rep.Disagreements[0].Message, "request 3 said Remaining 27")
}

// TestProbeLayersAgree probes the same two limits as
// TestProbeLayeredLimits, as layers of one Flow: the
// fields now describe the binding layer, so the client is told Remaining
// 2, 1, 0 by the global layer, and the 429 that follows surprises no one.
// The probe finds no disagreement.
func TestProbeLayersAgree(t *testing.T) {
	t.Parallel()
	clientIP, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	ip := clientIP.Key
	layers := []httplimit.Layer{
		{Policy: core.Policy{Name: "global", Algorithm: core.TokenBucket, Limit: 60, Window: time.Minute, Burst: 3}, Key: ip},
		{Policy: core.Policy{Name: "users", Algorithm: core.FixedWindow, Limit: 30, Window: time.Hour}, Key: ip, Routes: []string{"/users/{id}"}},
	}
	store, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	l, err := httplimit.New(store, layers)
	require.NoError(t, err)
	r := chi.NewRouter()
	r.Use(chilimit.New(l))
	r.Get("/users/{id}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) })
	code, rep, stderr := probeJSON(t, "--rate", "50", "--requests", "5", "--concurrency", "1", "--max-wait", "0", serve(t, r)+"/users/1")
	require.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Empty(t, rep.Disagreements)
	assert.Equal(t, map[string]int{"200": 3, "429": 2}, rep.Statuses)
}

// TestProbeProgress: a run longer than two seconds tells its progress on
// stderr, and only there.
func TestProbeProgress(t *testing.T) {
	t.Parallel()
	url := serve(t, http.NotFoundHandler())
	var stdout, stderr bytes.Buffer
	code := runProbe(context.Background(), []string{"--rate", "10", "--duration", "2500ms", "--json", url}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr: %s", stderr.String())
	assert.Regexp(t, `probe: 2\d/25 answered, 0 with 429, 0 without a response, 2s`, stderr.String())
	assert.NotContains(t, stdout.String(), "answered")
}

// TestProbeProgressNoServer: against a closed port, the progress counts
// no request as answered, and every one sent as without a response.
func TestProbeProgressNoServer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // the port is free again: connections are refused
	var stdout, stderr bytes.Buffer
	code := runProbe(context.Background(), []string{"--rate", "10", "--duration", "2500ms", "--json", url}, &stdout, &stderr)
	require.Equal(t, 2, code, "stderr: %s", stderr.String())
	assert.Regexp(t, `probe: 0/25 answered, 0 with 429, 2\d without a response, 2s`, stderr.String())
	assert.NotRegexp(t, `probe: [1-9]\d*/25 answered`, stderr.String())
}
