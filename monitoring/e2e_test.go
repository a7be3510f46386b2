//go:build unix

package monitoring_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/rules/outcome"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/monitoring"
)

// counts are decisions by limit and outcome.
type counts map[string]map[string]float64

func (c counts) add(limit string, o outcome.Outcome) {
	if c[limit] == nil {
		c[limit] = make(map[string]float64)
	}
	c[limit][o.String()]++
}

// String lists the non-zero counts in order: "global/allowed=20 ...".
func (c counts) String() string {
	var s []string
	for limit, byOutcome := range c {
		for o, n := range byOutcome {
			if n != 0 {
				s = append(s, fmt.Sprintf("%s/%s=%v", limit, o, n))
			}
		}
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

// TestE2EPrometheus runs the chi example and a real Prometheus scraping its
// /metrics every second with the repo's rules loaded, sends a known number
// of requests over loopback sockets, some over the limits, and finds in
// Prometheus exactly the admissions and denials the HTTP statuses told,
// per limit and outcome. Then every expression of the dashboard and of the
// rules must parse and return a series from that Prometheus, and every
// rule must evaluate without error.
func TestE2EPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an example and a Prometheus server for about 15 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(90*time.Second))
	defer cancel()
	start := time.Now()
	s := startStack(t, ctx)
	t.Logf("example at %s, Prometheus at %s, scraping after %v", s.app, s.prom, time.Since(start).Round(time.Millisecond))

	want := counts{}
	client := clientFrom("")
	send := func(method, path string, header ...string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, s.app+path, nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := client.Do(req)
		require.NoError(t, err, "%s %s", method, path)
		_, err = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		require.NoError(t, err, "%s %s: reading the body", method, path)
		require.Contains(t, []int{http.StatusOK, http.StatusUnauthorized, http.StatusTooManyRequests}, res.StatusCode, "%s %s", method, path)
		return res.StatusCode
	}

	// The example's limiter is layered: each request is checked against
	// the global layer (a burst of 20, one more every 600 ms) and its
	// route's layer at once, and counted under every layer that applied
	// to it, with that layer's own outcome. The login, API and users
	// requests come first, fewer than the burst: the global layer admits
	// each of them.
	//
	// The login layer is a brute-force guard (5 of 15 minutes): the
	// attempts, sent without a password, pass (and get 401) up to its
	// limit; the next one locks the client out, and it and those after it
	// are locked_out; the global layer, which had room, counts each
	// allowed (it took nothing from the refused ones).
	login := demoLoginLimit + 3
	for i := 0; i < login; i++ {
		if send(http.MethodPost, "/login") == http.StatusTooManyRequests {
			want.add("login", outcome.LockedOut)
		} else {
			want.add("login", outcome.Allowed)
		}
		want.add("global", outcome.Allowed)
	}
	// The API (1000 an hour), users and posts (30 a minute each) layers
	// admit theirs, and so does the global layer.
	for _, r := range []struct{ path, layer string }{
		{"/api/data", "api"}, {"/users/1", "users"}, {"/users/2", "users"}, {"/users/1/posts", "posts"},
	} {
		header := []string(nil)
		if r.path == "/api/data" {
			header = []string{demoAPIKeyHeader, "e2e-test-key"}
		}
		require.Equal(t, http.StatusOK, send(http.MethodGet, r.path, header...), "%s: within every limit", r.path)
		want.add("global", outcome.Allowed)
		want.add(r.layer, outcome.Allowed)
	}
	// Then GET /, under the global limit only, until it has denied 10.
	for denied, i := 0, 0; denied < 10; i++ {
		require.Less(t, i, demoGlobalBurst+100, "GET / never denied 10 requests")
		if send(http.MethodGet, "/") == http.StatusOK {
			want.add("global", outcome.Allowed)
		} else {
			want.add("global", outcome.Denied)
			denied++
		}
	}
	require.Equal(t, float64(demoLoginLimit), want["login"][outcome.Allowed.String()], "logins admitted")
	require.Equal(t, 3.0, want["login"][outcome.LockedOut.String()], "logins locked out")
	t.Logf("sent: %v", want)

	// Prometheus must find exactly those counts, and zero for every other
	// limit and outcome.
	var got counts
	err := poll(ctx, 30*time.Second, 250*time.Millisecond, func() (bool, string) {
		r, err := s.query(ctx, fmt.Sprintf(`sum by (limit, outcome) (ratelimit_decisions_total{job=%q})`, stackJob))
		if err != nil {
			return false, err.Error()
		}
		got = counts{}
		for _, smp := range r {
			limit, outcome := smp.Metric["limit"], smp.Metric["outcome"]
			if got[limit] == nil {
				got[limit] = make(map[string]float64)
			}
			got[limit][outcome] = smp.Value
		}
		return sameCounts(want, got), fmt.Sprintf("Prometheus has %v, want %v", got, want)
	})
	require.NoError(t, err, "ratelimit_decisions_total in Prometheus")
	for _, limit := range []string{"global", "login", "api", "users", "posts"} {
		for _, o := range outcome.All() {
			_, ok := got[limit][o.String()]
			assert.True(t, ok, "series ratelimit_decisions_total{limit=%q,outcome=%q} exists, at 0 if nothing", limit, o)
		}
	}
	t.Logf("Prometheus counts them exactly after %v", time.Since(start).Round(time.Millisecond))

	// The login limit (5 in 15 minutes) left less than a fifth of its
	// capacity once: after the 5th admission.
	r, err := s.query(ctx, fmt.Sprintf(`ratelimit_near_limit_total{job=%q,limit=%q}`, stackJob, "login"))
	require.NoError(t, err)
	if assert.Len(t, r, 1, "ratelimit_near_limit_total{limit=login}") {
		assert.Equal(t, 1.0, r[0].Value, "near-limit admissions of the login limit")
	}

	// Every expression of the dashboard and the rules parses and returns
	// a series. Recording rules and rate() over a few scrapes may take a
	// few seconds: each is polled, within one bound for all.
	dash, err := monitoring.DashboardExprs()
	require.NoError(t, err, "monitoring.DashboardExprs")
	require.NotEmpty(t, dash, "the dashboard's expressions")
	rules, err := monitoring.RuleExprs()
	require.NoError(t, err, "monitoring.RuleExprs")
	require.NotEmpty(t, rules, "the rules")
	type check struct{ what, expr string }
	var checks []check
	for i, e := range dash {
		checks = append(checks, check{fmt.Sprintf("dashboard expression %d", i+1), e})
	}
	var records, alerts int
	for _, rule := range rules {
		if rule.IsAlert {
			alerts++
			require.NotEmpty(t, rule.Signal, "alert %s: its Signal", rule.Name)
			checks = append(checks, check{"alert " + rule.Name + " (Signal)", rule.Signal})
			// The alert's own expression parses (it returns a series
			// only while it fires).
			_, err := s.query(ctx, rule.Expr)
			assert.NoError(t, err, "alert %s: expr %s", rule.Name, rule.Expr)
			continue
		}
		records++
		checks = append(checks, check{"recording rule " + rule.Name, rule.Expr})
		checks = append(checks, check{"series recorded by " + rule.Name, rule.Name})
	}
	deadline, cancelChecks := context.WithTimeout(ctx, testwait.D(30*time.Second))
	defer cancelChecks()
	for _, c := range checks {
		var last []sample
		var refused *promError
		err := poll(deadline, time.Minute, 250*time.Millisecond, func() (bool, string) {
			r, err := s.query(ctx, c.expr)
			if errors.As(err, &refused) {
				return true, "" // a parse error does not heal
			}
			if err != nil {
				return false, err.Error()
			}
			last = r
			return len(r) > 0, "no series"
		})
		if refused != nil {
			assert.Fail(t, "Prometheus refuses "+c.what, "%s: %v", c.expr, refused)
			continue
		}
		if assert.NoError(t, err, "%s returns a series: %s", c.what, c.expr) {
			t.Logf("%s: %d series, e.g. %v", c.what, len(last), last[0])
		}
	}

	// Prometheus loaded every rule and evaluates each without error.
	err = poll(ctx, 10*time.Second, 250*time.Millisecond, func() (bool, string) {
		loaded, err := s.rules(ctx)
		if err != nil {
			return false, err.Error()
		}
		if len(loaded) != len(rules) {
			return false, fmt.Sprintf("%d rules loaded, the rules file has %d", len(loaded), len(rules))
		}
		for _, r := range loaded {
			if r.Health != "ok" {
				return false, fmt.Sprintf("rule %s: health %q, last error %q", r.Name, r.Health, r.LastError)
			}
		}
		return true, ""
	})
	assert.NoError(t, err, "rule evaluation in Prometheus")
	t.Logf("%d dashboard expressions, %d recording rules and %d alerts checked; %v in all",
		len(dash), records, alerts, time.Since(start).Round(time.Millisecond))
}

// sameCounts reports whether got has want's counts and zero for
// everything else.
func sameCounts(want, got counts) bool {
	for _, pair := range [][2]counts{{want, got}, {got, want}} {
		for limit, byOutcome := range pair[0] {
			for o, n := range byOutcome {
				if pair[1][limit][o] != n {
					return false
				}
			}
		}
	}
	return true
}
