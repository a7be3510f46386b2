package chilimit_test

import (
	"net/http"
	"net/http/httptest"
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
func TestCanonicalHeaders(t *testing.T) { adapterstest.RunCanonical(t, canonicalHarness{}) }

type canonicalHarness struct{}

func (canonicalHarness) ServeOne(_ testing.TB, f *httplimit.Flow, req adapterstest.Request, names []string) adapterstest.HeaderReads {
	var got adapterstest.HeaderReads
	r := chi.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r)
			got.After = adapterstest.ReadFields(names, w.Header().Get)
		})
	})
	r.Use(chilimit.New(f))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) {
		got.Handler = adapterstest.ReadFields(names, w.Header().Get)
		_, _ = w.Write([]byte(adapterstest.Body))
	})
	rec := httptest.NewRecorder()
	hr := httptest.NewRequest(req.Method, req.Path, nil)
	hr.RemoteAddr = req.RemoteAddr
	for k, vs := range req.Header {
		hr.Header[k] = vs
	}
	r.ServeHTTP(rec, hr)
	got.Status = rec.Code
	got.Recorder = adapterstest.ReadFields(names, rec.Header().Get)
	return got
}
