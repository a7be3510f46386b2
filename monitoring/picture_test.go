//go:build unix

package monitoring_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/rules/picturedata"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

var updatePicture = flag.Bool("update-picture", false,
	"TestPicture: run 80 s of traffic through the chi example and a real Prometheus, and write what Prometheus recorded to "+pictureData)

// pictureData is the data of the guide's picture, from this folder. The
// picture itself (monitoring.png and .svg beside it) is drawn from it by
// the command's module, which has the plotting library this module does
// not require: go test ./cmd/ratelimit/internal/picture -update-picture.
const pictureData = "../docs/img/monitoring.json"

// The outcomes of ratelimit_decisions_total, admitted and denied. The
// demo's login limit is a brute-force guard: its denials are locked_out.
const (
	admittedOutcomes = "allowed|fallback_allowed|failed_open"
	deniedOutcomes   = "denied|deny_cache|fallback_denied|failed_closed|locked_out"
)

// A phase is one client's traffic in the picture's run.
type phase struct {
	name     string        // shown on the picture when mark is set
	ip       string        // its source address: the example's client key
	method   string        // GET, POST
	path     string        // on the example
	header   []string      // name, value
	every    time.Duration // one request each
	from, to time.Duration // after the run's start
	mark     bool          // draw its start and name
}

// picturePhases is the traffic of the picture's run: two steady clients
// well under their limits all along, a burst that crosses the global limit
// and a password-guessing client that crosses the login limit.
func picturePhases() []phase {
	key := []string{demoAPIKeyHeader, "picture-key"}
	return []phase{
		{name: "steady client", ip: "127.0.0.2", method: http.MethodGet, path: "/", every: time.Second, to: 80 * time.Second},
		{name: "steady client, users", ip: "127.0.0.2", method: http.MethodGet, path: "/users/1", every: 4 * time.Second, to: 80 * time.Second},
		{name: "API client", ip: "127.0.0.3", method: http.MethodGet, path: "/api/data", header: key, every: 700 * time.Millisecond, to: 80 * time.Second},
		{name: "burst on GET /", ip: "127.0.0.4", method: http.MethodGet, path: "/", every: 100 * time.Millisecond, from: 15 * time.Second, to: 40 * time.Second, mark: true},
		{name: "login guessing", ip: "127.0.0.5", method: http.MethodPost, path: "/login", every: 500 * time.Millisecond, from: 48 * time.Second, to: 63 * time.Second, mark: true},
	}
}

// TestPicture records the data of the guide's picture from a real run: the
// chi example under picturePhases' traffic, scraped by Prometheus every
// second, and Prometheus's own answers to /api/v1/query_range for the
// admitted and denied rates and the deny ratio of each limit. It runs only
// with -update-picture, and writes pictureData; the picture is drawn from
// that file in the command's module:
//
//	go test ./monitoring -run TestPicture -update-picture
//	go test ./cmd/ratelimit/internal/picture -update-picture
func TestPicture(t *testing.T) {
	if !*updatePicture {
		t.Skip("records docs/img/monitoring.json from an 80 s run; pass -update-picture")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.D(4*time.Minute))
	defer cancel()
	s := startStack(t, ctx)

	phases := picturePhases()
	clients := map[string]*http.Client{}
	for _, ph := range phases {
		if clients[ph.ip] == nil {
			clients[ph.ip] = clientFrom(ph.ip)
		}
	}
	// Two scrapes of zeros before the traffic, so that rate() starts at 0.
	time.Sleep(2 * time.Second)
	start := time.Now()
	var end time.Duration
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[string]map[int]int{}
	for _, ph := range phases {
		end = max(end, ph.to)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[ph.ip]
			time.Sleep(time.Until(start.Add(ph.from)))
			tick := time.NewTicker(ph.every)
			defer tick.Stop()
			for time.Since(start) < ph.to && ctx.Err() == nil {
				code := request(ctx, c, ph.method, s.app+ph.path, ph.header)
				mu.Lock()
				if statuses[ph.name] == nil {
					statuses[ph.name] = map[int]int{}
				}
				statuses[ph.name][code]++
				mu.Unlock()
				<-tick.C
			}
		}()
	}
	wg.Wait()
	t.Logf("statuses by client: %v", statuses)
	time.Sleep(3 * time.Second) // the last scrape and evaluation

	from, to := start.Add(-2*time.Second), start.Add(end+2*time.Second)
	sel := fmt.Sprintf(`ratelimit_decisions_total{job=%q,outcome=~"%%s"}`, stackJob)
	rate := func(outcomes string) string {
		return fmt.Sprintf(`sum by (limit) (rate(%s[10s]))`, fmt.Sprintf(sel, outcomes))
	}
	panels := []struct {
		title, expr string
		ratio       bool
	}{
		{title: "admitted per second, by limit", expr: rate(admittedOutcomes)},
		{title: "denied per second, by limit", expr: rate(deniedOutcomes)},
		{title: "deny ratio (denied / decided), by limit", expr: rate(deniedOutcomes) + " / " + rate(admittedOutcomes+"|"+deniedOutcomes), ratio: true},
	}
	pic := picturedata.Picture{Title: "The chi example under changing traffic, scraped by a real Prometheus every second\n" +
		"sum by (limit) (rate(ratelimit_decisions_total{outcome=...}[10s])), from /api/v1/query_range\n" +
		"steady clients all along: GET / 1/s, GET /api/data 1.4/s, GET /users/1 every 4 s; shaded: one client's burst, 10/s; another guessing passwords, 2/s"}
	for _, pn := range panels {
		r, err := s.queryRange(ctx, pn.expr, from, to, time.Second)
		require.NoError(t, err, "query_range %s", pn.expr)
		require.NotEmpty(t, r, "query_range %s", pn.expr)
		p := picturedata.Panel{Title: pn.title, Expr: pn.expr, Ratio: pn.ratio}
		for _, rs := range r {
			ps := picturedata.Series{Limit: rs.Metric["limit"]}
			for i, v := range rs.V {
				ps.X = append(ps.X, rs.T[i].Sub(start).Seconds())
				if math.IsNaN(v) || math.IsInf(v, 0) {
					ps.Y = append(ps.Y, nil) // a ratio while its limit decides nothing
				} else {
					ps.Y = append(ps.Y, &v)
				}
			}
			p.Series = append(p.Series, ps)
		}
		sort.Slice(p.Series, func(a, b int) bool { return p.Series[a].Limit < p.Series[b].Limit })
		pic.Panels = append(pic.Panels, p)
	}
	for _, ph := range phases {
		if ph.mark {
			pic.Marks = append(pic.Marks, picturedata.Mark{At: ph.from.Seconds(), To: ph.to.Seconds(), Text: ph.name})
		}
	}
	out, err := json.MarshalIndent(pic, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(pictureData, append(out, '\n'), 0o644))
	t.Logf("wrote %s; draw it: go test ./cmd/ratelimit/internal/picture -update-picture", pictureData)
}

// request sends one request and returns its status, or 0 when it failed.
func request(ctx context.Context, c *http.Client, method, url string, header []string) int {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}
