package chilimit_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
)

// TestCanonicalHeaders reads every field the flow writes with
// http.Header.Get: in the handler, in a middleware around the limiter,
// and on an httptest.ResponseRecorder, as a chi application and its tests
// do.
func TestCanonicalHeaders(t *testing.T) {
	adapterstest.RunCanonical(t, func(_ testing.TB, f *httplimit.Flow, req adapterstest.Request, read *adapterstest.FieldReads) (int, func(string) string) {
		r := chi.NewRouter()
		r.Use(func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				next.ServeHTTP(w, r)
				read.After(w.Header().Get)
			})
		})
		r.Use(chilimit.New(f))
		r.Get("/", func(w http.ResponseWriter, _ *http.Request) {
			read.Handler(w.Header().Get)
			_, _ = w.Write([]byte(adapterstest.Body))
		})
		res := adapterstest.ServeHTTP(r, req) // an httptest.ResponseRecorder's
		return res.Status, res.Header.Get
	})
}
