package chilimit_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/reputation"
)

// chi tells its NotFound and a file server's route apart by the route
// pattern; a catch-all route as the 404 page it cannot tell, unless the
// handler marks it.
func (harness) NotFoundIdioms() []adapterstest.NotFoundIdiom {
	return []adapterstest.NotFoundIdiom{
		{Name: "default"},
		{Name: "NotFound", Handler: true},
		{Name: "FileServer", Static: true},
		{Name: "NotFound+FileServer", Handler: true, Static: true},
		{Name: "catch-all", Handler: true, CatchAll: true},
		{Name: "catch-all-marked", Handler: true, CatchAll: true, Marked: true, Static: true},
	}
}

func (harness) ServeNotFound(t testing.TB, idiom adapterstest.NotFoundIdiom, f *httplimit.Flow, dir string) string {
	r := chi.NewRouter()
	r.Use(chilimit.New(f))
	r.Get("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(adapterstest.Body)) })
	r.Get("/files/{name}", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no such file", http.StatusNotFound) })
	if idiom.Static {
		r.Handle("/static/*", http.StripPrefix("/static/", http.FileServer(http.Dir(dir))))
	}
	notFound := func(w http.ResponseWriter, r *http.Request) {
		if idiom.Marked {
			reputation.MarkUnrouted(r.Context())
		}
		http.Error(w, adapterstest.NotFoundBody, http.StatusNotFound)
	}
	switch {
	case idiom.CatchAll:
		r.HandleFunc("/*", notFound)
	case idiom.Handler:
		r.NotFound(notFound)
	}
	return adapterstest.ListenHTTP(t, r)
}

// TestNotFound checks chi's idioms for "not found" with a reputation.
func TestNotFound(t *testing.T) { adapterstest.RunNotFound(t, harness{}) }

// TestNotFoundServeMux checks a ServeMux's idioms for "not found" with a
// reputation, the whole mux behind chilimit.New.
func TestNotFoundServeMux(t *testing.T) {
	adapterstest.RunNotFound(t, adapterstest.ServeMuxNotFound(func(f *httplimit.Flow, mux http.Handler) http.Handler {
		return chilimit.New(f)(mux)
	}))
}
