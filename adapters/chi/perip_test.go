package chilimit_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	chilimit "github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
)

// TestPerIPOverSockets: the one-line form, httplimit.PerIP mounted with
// chilimit.New, served by net/http on a real listener on 127.0.0.1
// (adapterstest.CheckPerIP).
func TestPerIPOverSockets(t *testing.T) {
	adapterstest.CheckPerIP(t, func(t testing.TB, f *httplimit.Flow) string {
		r := chi.NewRouter()
		r.Use(chilimit.New(f))
		r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(adapterstest.Body)) })
		return adapterstest.ListenHTTP(t, r)
	})
}
