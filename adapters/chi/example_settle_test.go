package chilimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// A quota of tokens, known once the handler is done: each request
// reserves its most (100), and the handler reports what it used.
func ExampleNew_reportedCost() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	flow, err := httplimit.New(store, []httplimit.Layer{{
		Policy: core.Policy{Name: "tokens", Algorithm: core.SlidingWindowLog, Limit: 1000, Window: time.Hour},
		Counts: httplimit.CountReported,
		Cost:   func(keyfuncs.Request) int64 { return 100 }, // the reserve: the most a request may cost
	}})
	if err != nil {
		panic(err)
	}
	r := chi.NewRouter()
	r.Use(chilimit.New(flow))
	r.Post("/complete", func(w http.ResponseWriter, r *http.Request) {
		httplimit.ReportCost(r.Context(), 37) // the tokens the model generated
		fmt.Fprint(w, "done")
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	for range 3 {
		res, err := http.Post(srv.URL+"/complete", "text/plain", nil)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		// Remaining is told on admission, with the reserve taken.
		fmt.Println(res.StatusCode, res.Header.Get("X-RateLimit-Remaining"))
	}
	out := make([]core.Decision, 1)
	if err := flow.Limiter().Peek(context.Background(), time.Time{}, []core.Request{{Key: "ip:127.0.0.1"}}, out); err != nil {
		panic(err)
	}
	fmt.Println("used:", out[0].Limit-out[0].Remaining)
	// Output:
	// 200 900
	// 200 863
	// 200 826
	// used: 111
}
