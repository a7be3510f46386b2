package adapterstest

import (
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

// NotFoundBody is what an idiom's own not-found handler answers, with
// status 404.
const NotFoundBody = "no such page"

// StaticFile is the one file of the directory an idiom's static file
// server serves under /static/, and StaticBody its content.
const (
	StaticFile = "hello.txt"
	StaticBody = "hello, static"
)

// NotFoundIdiom is one of a framework's documented ways to answer a path
// no route serves, or to serve static files, for RunNotFound.
type NotFoundIdiom struct {
	Name string
	// Handler: the app has a not-found handler of its own (Gin's NoRoute,
	// chi's NotFound, Echo's RouteNotFound, a last app.Use in Fiber...),
	// answering 404 NotFoundBody; otherwise the framework answers.
	Handler bool
	// Static: the app serves a directory under /static/ with the
	// framework's static file server (r.Static, e.Static, app.Static,
	// http.FileServer).
	Static bool
	// CatchAll: the not-found handler is a catch-all route ("/*"), which
	// the framework's routing cannot tell from a route; Marked: it calls
	// reputation.MarkUnrouted.
	CatchAll, Marked bool
}

// NotFoundHarness serves apps in a framework's idioms for "not found".
type NotFoundHarness interface {
	// NotFoundIdioms lists the framework's idioms.
	NotFoundIdioms() []NotFoundIdiom
	// ServeNotFound serves an app in idiom on a loopback socket until the
	// test ends and returns its address. f is mounted for every request
	// with the framework's Use; GET / answers 200 Body, GET /files/:name
	// answers 404 (a route that exists, its resource missing); with
	// idiom.Static, the framework's file server serves dir under /static/;
	// with idiom.Handler, the idiom's not-found handler answers 404
	// NotFoundBody.
	ServeNotFound(t testing.TB, idiom NotFoundIdiom, f *httplimit.Flow, dir string) string
}

// ServeMuxNotFound is the NotFoundHarness of a ServeMux that limit(f, mux)
// limits: an adapter's middleware of f around the whole mux.
type ServeMuxNotFound func(f *httplimit.Flow, mux http.Handler) http.Handler

// NotFoundIdioms: a ServeMux tells its own 404 by the pattern; "/" is a
// catch-all it cannot tell from a route, unless the handler marks it.
func (ServeMuxNotFound) NotFoundIdioms() []NotFoundIdiom {
	return []NotFoundIdiom{
		{Name: "default"},
		{Name: "FileServer", Static: true},
		{Name: "catch-all", Handler: true, CatchAll: true},
		{Name: "catch-all-marked", Handler: true, CatchAll: true, Marked: true, Static: true},
	}
}

// ServeNotFound serves a ServeMux in idiom, limited by limit(f, mux).
func (limit ServeMuxNotFound) ServeNotFound(t testing.TB, idiom NotFoundIdiom, f *httplimit.Flow, dir string) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(Body)) })
	mux.HandleFunc("GET /files/{name}", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no such file", http.StatusNotFound) })
	if idiom.Static {
		mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServer(http.Dir(dir))))
	}
	if idiom.CatchAll {
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			if idiom.Marked {
				reputation.MarkUnrouted(r.Context())
			}
			http.Error(w, NotFoundBody, http.StatusNotFound)
		})
	}
	return ListenHTTP(t, limit(f, mux))
}

// RunNotFound checks, over real sockets, that each of a framework's
// idioms for "not found" tells a reputation which of two a 404 is: a
// path no route serves, as scanners ask (Unrouted), or a route that
// answered 404, a missing static file included (NotFound). In every
// idiom the framework can tell, or whose handler marks it:
//   - a scanner walking 150 unknown paths scores Unrouted and is banned
//     at its 41st;
//   - a client asking for 150 missing files on a route, or 150 missing
//     static files, scores NotFound and is never banned, and the static
//     file that exists is served.
//
// In an idiom the framework cannot tell and nothing marks (a catch-all
// route as the 404 page), the scanner scores NotFound: what
// docs/reputation.md says.
func RunNotFound(t *testing.T, h NotFoundHarness) {
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("127.0.0.0/8"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, StaticFile), []byte(StaticBody), 0o600))
	run := rand.IntN(1 << 20)
	for i, idiom := range h.NotFoundIdioms() {
		t.Run(idiom.Name, func(t *testing.T) {
			// NotFound weighs little but is heard: each client's signals are
			// recorded by kind.
			rep, err := reputation.New(reputation.Config{Bands: repBands, Weights: map[reputation.Signal]float64{reputation.NotFound: 1.0 / 1024}})
			require.NoError(t, err)
			sig := &signalLog{rep: rep}
			f := NewFlow(t, clockstore.At(NewStore(t), T0), []httplimit.Layer{{Policy: fixed("all", 1_000_000_000)}}, nil,
				httplimit.WithClientIP(client), httplimit.WithReputation(rep))
			addr := h.ServeNotFound(t, idiom, f, dir)
			ip := func(n int) string { return repIP(run+i, 100+n) }

			t.Run("scanner", func(t *testing.T) {
				seen, first, last := notFoundWalk(t, addr, ip(1), func(i int) string { return "/wp-admin/" + strconv.Itoa(i) + ".php" })
				if idiom.Handler {
					assert.Equal(t, NotFoundBody, strings.TrimSpace(first.Body), "the idiom's own not-found handler answers")
				}
				if idiom.CatchAll && !idiom.Marked {
					assert.Equal(t, map[int]int{http.StatusNotFound: 150}, seen, "a catch-all route the framework cannot tell from a route")
					assert.Equal(t, map[reputation.Signal]int{reputation.NotFound: 150}, sig.of(t, ip(1)))
					return
				}
				assert.Equal(t, map[int]int{http.StatusNotFound: 41, http.StatusForbidden: 1}, seen, "banned at its 41st unknown path")
				assert.Equal(t, http.StatusForbidden, last.Status)
				assert.Equal(t, map[reputation.Signal]int{reputation.Unrouted: 41}, sig.of(t, ip(1)), "signals")
			})

			t.Run("missing-on-a-route", func(t *testing.T) {
				seen, _, _ := notFoundWalk(t, addr, ip(2), func(i int) string { return "/files/f" + strconv.Itoa(i) })
				assert.Equal(t, map[int]int{http.StatusNotFound: 150}, seen, "a 404 on a route that exists is no scanner's")
				assert.Equal(t, map[reputation.Signal]int{reputation.NotFound: 150}, sig.of(t, ip(2)), "signals")
			})

			if !idiom.Static {
				return
			}
			t.Run("missing-static-files", func(t *testing.T) {
				seen, _, _ := notFoundWalk(t, addr, ip(3), func(i int) string { return "/static/app." + strconv.Itoa(i) + ".js" })
				assert.Equal(t, map[int]int{http.StatusNotFound: 150}, seen, "missing static files are no scanner's")
				assert.Equal(t, map[reputation.Signal]int{reputation.NotFound: 150}, sig.of(t, ip(3)), "signals")
				res := Send(t, addr, RawRequest{Path: "/static/" + StaticFile, Header: fromIP(ip(3))})
				assert.Equal(t, http.StatusOK, res.Status)
				assert.Equal(t, StaticBody, res.Body, "the file that exists is served")
			})
		})
	}
}

// RunNotFoundUnder checks, over real sockets, an app that serve serves
// with f mounted for every request, and GET prefix+"files/:name" answering
// 404: a scanner walking 150 unknown paths under prefix is banned at its
// 41st, and a client asking for 150 missing files on that route never.
func RunNotFoundUnder(t *testing.T, prefix string, serve func(t testing.TB, f *httplimit.Flow) string) {
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("127.0.0.0/8"))
	require.NoError(t, err)
	rep, err := reputation.New(reputation.Config{Bands: repBands})
	require.NoError(t, err)
	addr := serve(t, NewFlow(t, clockstore.At(NewStore(t), T0), []httplimit.Layer{{Policy: fixed("all", 1_000_000_000)}}, nil,
		httplimit.WithClientIP(client), httplimit.WithReputation(rep)))
	run := rand.IntN(1 << 20)
	seen, _, _ := notFoundWalk(t, addr, repIP(run, 1), func(i int) string { return prefix + "wp-" + strconv.Itoa(i) + ".php" })
	assert.Equal(t, map[int]int{http.StatusNotFound: 41, http.StatusForbidden: 1}, seen, "banned at its 41st unknown path under %s", prefix)
	seen, _, _ = notFoundWalk(t, addr, repIP(run, 2), func(i int) string { return prefix + "files/f" + strconv.Itoa(i) })
	assert.Equal(t, map[int]int{http.StatusNotFound: 150}, seen, "a 404 on a route that exists is no scanner's")
}

// notFoundWalk sends 150 GET requests for path(i) from ip on one
// connection, stopping at the first 403, and returns how many got each
// status, the first response and the last.
func notFoundWalk(t *testing.T, addr, ip string, path func(i int) string) (seen map[int]int, first, last Response) {
	t.Helper()
	c := Dial(t, addr)
	seen = map[int]int{}
	for i := range 150 {
		last = c.Do(t, RawRequest{Path: path(i), Header: fromIP(ip)})
		if i == 0 {
			first = last
		}
		seen[last.Status]++
		if last.Status == http.StatusForbidden {
			break
		}
	}
	return seen, first, last
}

// signalLog reads the signals a Tracker scored, by kind, one client at
// a time.
type signalLog struct {
	rep  *reputation.Tracker
	last map[reputation.Signal]uint64
}

// of returns the signals scored since the last call, which are the
// client ip's (the one client whose requests came meanwhile): its score
// holds them.
func (l *signalLog) of(t *testing.T, ip string) map[reputation.Signal]int {
	t.Helper()
	now := l.rep.Stats().Signals
	out := map[reputation.Signal]int{}
	for s, n := range now {
		if d := int(n - l.last[s]); d > 0 {
			out[s] = d
		}
	}
	l.last = now
	assert.Positive(t, l.rep.Score("ip:"+ip), "the signals count against %s", ip)
	return out
}
