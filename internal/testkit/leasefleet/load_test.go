//go:build unix

package leasefleet

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The load: bulk clients, each well under its own limits, whose sum is
// above the global limit; and probe clients which, early in each window,
// send above their client (or search) limit.
const (
	bulkRate    = 800 // requests a second, over every bulk client
	bulkClients = 400 // 10 requests a window each: under every own limit
	probes      = 8   // probe clients of each kind
	probeSends  = 45  // requests a probe client sends a window: above its limit
	workers     = 48  // concurrent requests at most
	// The probes send in [probeFrom, probeTo) of each window: after the
	// lease's in-process denials of the window before have ended (a
	// quarter of the Lease at most), while the global quota lasts.
	probeFrom = 600 * time.Millisecond
	probeTo   = 1600 * time.Millisecond
)

// shot is one request of the load.
type shot struct {
	server       int
	key, path    string
	method, kind string // kind: "bulk", "client" or "search" (the probes)
}

// result is one response, as the load generator saw it.
type result struct {
	shot
	t0, t1 time.Time // sent, answered
	status int
	limit  int64 // X-RateLimit-Limit: the binding layer's
	err    error
}

// drive sends the load to the servers at bases from now until end, and
// returns every response.
func drive(c *http.Client, bases []string, end time.Time) []result {
	shots := make(chan shot, 256)
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var mine []result
			for s := range shots {
				mine = append(mine, send(c, bases[s.server], s))
			}
			mu.Lock()
			results = append(results, mine...)
			mu.Unlock()
		})
	}
	produce(shots, len(bases), end)
	close(shots)
	wg.Wait()
	return results
}

// produce paces the shots into shots until end.
func produce(shots chan<- shot, servers int, end time.Time) {
	start := time.Now()
	firstProbed := WindowOf(start)
	if start.Sub(time.Unix(firstProbed, 0)) > probeFrom {
		firstProbed += int64(Window / time.Second)
	}
	var bulk, n int
	probed := map[int64]int{} // probe shots sent, by window
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for now := start; now.Before(end); now = <-tick.C {
		due := int(now.Sub(start).Seconds() * bulkRate)
		bulk = max(bulk, due-bulkRate/10) // behind (a busy machine): no burst to catch up
		for ; bulk < due; bulk++ {
			s := shot{key: "bulk-" + strconv.Itoa(bulk%bulkClients), method: http.MethodGet, path: ItemsPath, kind: "bulk"}
			switch bulk % 10 {
			case 0:
				s.path = SearchPath
			case 5:
				s.method = http.MethodPost
			}
			s.server, n = n%servers, n+1
			shots <- s
		}
		w := WindowOf(now)
		rel := now.Sub(time.Unix(w, 0))
		if w < firstProbed || rel < probeFrom {
			continue
		}
		total := 2 * probes * probeSends
		dueProbes := min(total, int(float64(total)*float64(rel-probeFrom)/float64(probeTo-probeFrom)))
		for ; probed[w] < dueProbes; probed[w]++ {
			i := probed[w] % (2 * probes)
			s := shot{key: fmt.Sprintf("probe-client-%d", i), method: http.MethodGet, path: ItemsPath, kind: "client"}
			if i >= probes {
				s.key, s.path, s.kind = fmt.Sprintf("probe-search-%d", i-probes), SearchPath, "search"
			}
			s.server, n = n%servers, n+1
			shots <- s
		}
	}
}

// send sends s and returns what came back.
func send(c *http.Client, base string, s shot) result {
	r := result{shot: s, t0: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, s.method, base+s.path, nil)
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set(KeyHeader, s.key)
	res, err := c.Do(req)
	if err != nil {
		r.err, r.t1 = err, time.Now()
		return r
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	r.t1 = time.Now()
	r.status = res.StatusCode
	r.limit, _ = strconv.ParseInt(res.Header.Get("X-Ratelimit-Limit"), 10, 64)
	return r
}

// newClient returns the load generator's client: keep-alive connections
// enough for every worker, to every server.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        workers * 8,
		MaxIdleConnsPerHost: workers,
		IdleConnTimeout:     30 * time.Second,
	}}
}
