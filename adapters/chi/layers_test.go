package chilimit_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// TestLayers runs the layered limits suite (httplimit.Layer) over
// real sockets, on a memory store and on Redis.
func TestLayers(t *testing.T) { adapterstest.RunLayers(t, harness{}, redistest.Start(t)) }

// BenchmarkChiLayers compares the four layers (three apply) with
// a single limit, mounted the same way.
func BenchmarkChiLayers(b *testing.B) {
	adapterstest.BenchLayersHTTP(b, func(f *httplimit.Flow) http.Handler {
		r := chi.NewRouter()
		r.Use(chilimit.New(f))
		r.Get("/users/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
		return r
	})
}
