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
	"github.com/apigate/ratelimit/keyfuncs"
)

// Limit per API key: the options are chilimit's own, no other import.
func ExampleWithKeyFunc() {
	limiter, closeStore := twoAnHour()
	defer closeStore()
	apiKey, err := keyfuncs.APIKeyHeader("X-API-Key", nil)
	if err != nil {
		panic(err)
	}

	r := chi.NewRouter()
	r.Use(chilimit.New(limiter, chilimit.WithKeyFunc(apiKey)))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello") })

	for _, key := range []string{"alice", "alice", "alice", "bob", ""} {
		req := httptest.NewRequest("GET", "/", nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Printf("%q %d\n", key, w.Code)
	}
	// Output:
	// "alice" 200
	// "alice" 200
	// "alice" 429
	// "bob" 200
	// "" 400
}

// A key function reads the *http.Request through Unwrap: here, a chi
// route parameter.
func ExampleUnwrap() {
	limiter, closeStore := twoAnHour()
	defer closeStore()
	perTenant := func(r keyfuncs.Request) (string, error) {
		req, ok := chilimit.Unwrap(r)
		if !ok || chi.URLParam(req, "tenant") == "" {
			return "", keyfuncs.ErrNoKey
		}
		return "tenant:" + chi.URLParam(req, "tenant"), nil
	}

	r := chi.NewRouter()
	r.With(chilimit.New(limiter, chilimit.WithKeyFunc(perTenant))).Get("/t/{tenant}/items",
		func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "items") })

	for _, path := range []string{"/t/acme/items", "/t/acme/items", "/t/acme/items", "/t/globex/items"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, w.Code)
	}
	// Output:
	// /t/acme/items 200
	// /t/acme/items 200
	// /t/acme/items 429
	// /t/globex/items 200
}

// twoAnHour returns a limiter of two requests an hour per key, built as in
// ExampleNew, and the function that closes its store.
func twoAnHour() (*core.Limiter, func() error) {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(store, core.Policy{
		Algorithm: core.SlidingWindowLog, Limit: 2, Window: time.Hour,
	})
	if err != nil {
		panic(err)
	}
	return limiter, store.Close
}
