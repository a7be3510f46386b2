package chilimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

func ExampleNew() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(store, core.Policy{
		Algorithm: core.SlidingWindowCounter, Limit: 10, Window: time.Minute,
	})
	if err != nil {
		panic(err)
	}

	r := chi.NewRouter()
	r.Use(chilimit.New(limiter)) // keyed on the socket peer's IP
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello") })

	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "203.0.113.7:51234"
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	// The fields are written as the standards spell them, and sent so on
	// the wire; a client's parser canonicalizes them, a recorder does not.
	fmt.Println(w.Code, w.Header()["X-RateLimit-Remaining"])
	// Output: 200 [9]
}
