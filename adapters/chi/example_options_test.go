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
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Limit per API key: the layer's Key.
func Example_keyFunc() {
	apiKey, err := keyfuncs.APIKeyHeader("X-API-Key", nil)
	if err != nil {
		panic(err)
	}

	flow, closeStore := twoAnHour(apiKey)
	defer closeStore()

	r := chi.NewRouter()
	r.Use(chilimit.New(flow))
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
	perTenant := func(r keyfuncs.Request) (string, error) {
		req, ok := chilimit.Unwrap(r)
		if !ok || chi.URLParam(req, "tenant") == "" {
			return "", keyfuncs.ErrNoKey
		}
		return "tenant:" + chi.URLParam(req, "tenant"), nil
	}

	flow, closeStore := twoAnHour(perTenant)
	defer closeStore()

	r := chi.NewRouter()
	r.With(chilimit.New(flow)).Get("/t/{tenant}/items",
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

// twoAnHour returns a Flow of two requests an hour per key (key nil: per
// address), built as in ExampleNew, and the function that closes its store.
func twoAnHour(key keyfuncs.Func, opts ...httplimit.Option) (*httplimit.Flow, func() error) {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	flow, err := httplimit.New(store, []httplimit.Layer{{Policy: core.Policy{
		Algorithm: core.SlidingWindowLog, Limit: 2, Window: time.Hour,
	}, Key: key}}, opts...)
	if err != nil {
		panic(err)
	}
	return flow, store.Close
}
