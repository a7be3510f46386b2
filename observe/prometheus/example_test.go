package promlimit_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	promlimit "github.com/apigate/ratelimit/observe/prometheus"
)

// Register the Metrics, give them to every Limiter with core.WithObserver,
// and serve the registry: each decision is counted by limit and outcome.
func Example() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()

	metrics, err := promlimit.New()
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	if err := metrics.WatchStore("main", store); err != nil {
		panic(err)
	}

	login, err := core.NewLimiter(store, []core.Policy{
		{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 2, Window: 15 * time.Minute}},

		core.WithObserver(metrics))

	if err != nil {
		panic(err)
	}
	for range 3 {
		_, _ = login.AllowN(context.Background(), "203.0.113.7", 1, time.Time{})
	}

	// What Prometheus scrapes: mount it at /metrics.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "ratelimit_decisions_total") && !strings.HasSuffix(line, " 0") ||
			strings.HasPrefix(line, "ratelimit_memstore_keys") ||
			strings.HasPrefix(line, "ratelimit_store_health") && strings.HasSuffix(line, " 1") {
			fmt.Println(line)
		}
	}
	// Output:
	// ratelimit_decisions_total{limit="login",outcome="allowed"} 2
	// ratelimit_decisions_total{limit="login",outcome="denied"} 1
	// ratelimit_memstore_keys{store="main"} 1
	// ratelimit_store_health{limit="login",state="healthy"} 1
}
