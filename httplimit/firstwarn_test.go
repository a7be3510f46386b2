package httplimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/userkey"
	"github.com/apigate/ratelimit/keyfuncs"
)

// The messages of LogErrors' first-occurrence checks, as
// docs/monitoring.md quotes them.
const (
	msgFirstNoKey = "ratelimit: no key in request, the first (later ones are logged at Debug): " +
		"if every request should have a key, mount the limiter after the middleware that sets it (authentication), " +
		"or fall back to the client IP with keyfuncs.FirstOf"
	msgFirstIDType = "ratelimit: user ID of an unusable type, the first (later ones are logged at Debug): " +
		"a user ID must be a string, an integer or a fmt.Stringer; store the ID itself, not a struct that holds it, " +
		"or convert it in the middleware that sets it; until then, each such request is refused (500 by default)"
)

// idTypeKey is a key function that finds a user ID of a type no key
// function can use, as the adapters' User do for a struct stored as the
// user.
func idTypeKey(keyfuncs.Request) (string, error) {
	return userkey.New(`gin context key "user"`).Value(struct{ Sub string }{"alice"}, true)
}

// noUserKey is keyfuncs.User finding no user in the context: a limiter
// mounted before the authentication middleware.
func noUserKey(t testing.TB) keyfuncs.Func {
	t.Helper()
	fn, err := keyfuncs.User(func(context.Context) (string, bool) { return "", false })
	require.NoError(t, err)
	return fn
}

// levels returns the level and message of each record of rec.
func levels(rec *recordHandler) []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var got []string
	for _, r := range rec.records {
		got = append(got, r.Level.String()+" "+r.Message)
	}
	return got
}

// TestLogErrorsWarnsFirstOnce: LogErrors logs the first request without
// a key, and the first user ID of an unusable type, at Warn with the fix,
// and every later one at Debug, the two counted apart, from goroutines at
// once (run with -race). Another LogErrors warns on its own. The records
// still carry the error, the method and the route.
func TestLogErrorsWarnsFirstOnce(t *testing.T) {
	_, idTypeErr := idTypeKey(nil)
	noKey := fmt.Errorf(`layer "users": %w`, keyfuncs.ErrNoKey) // wrapped, as a flow of layers does
	var rec recordHandler
	h := httplimit.LogErrors(rec.logger())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				h(newRequest(), noKey)
				h(newRequest(), idTypeErr)
			}
		})
	}
	wg.Wait()
	counts := map[string]int{}
	for _, l := range levels(&rec) {
		counts[l]++
	}
	assert.Equal(t, map[string]int{
		"WARN " + msgFirstNoKey:                        1,
		"DEBUG ratelimit: no key in request":           99,
		"WARN " + msgFirstIDType:                       1,
		"DEBUG ratelimit: user ID of an unusable type": 99,
	}, counts)
	for _, r := range rec.records {
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		assert.Equal(t, "GET", attrs["method"], r.Message)
		assert.Equal(t, "/", attrs["route"], r.Message)
		assert.NotEmpty(t, attrs["error"], r.Message)
	}

	var other recordHandler
	h2 := httplimit.LogErrors(other.logger())
	h2(newRequest(), keyfuncs.ErrNoKey)
	h2(newRequest(), keyfuncs.ErrNoKey)
	assert.Equal(t, []string{"WARN " + msgFirstNoKey, "DEBUG ratelimit: no key in request"}, levels(&other),
		"another LogErrors warns on its own")
}

// TestFlowWarnsFirstOnce: Flows given no WithErrorHandler log on
// slog.Default(), each through its own LogErrors: for two requests of
// each mistake, one Warn record. A limiter whose user key finds no user
// answers 400; one whose user ID is of an unusable type, 500; the default
// key, the socket peer, meets a request from behind a proxy
// (X-Forwarded-For), which passes.
func TestFlowWarnsFirstOnce(t *testing.T) {
	var rec recordHandler
	prev := slog.Default()
	slog.SetDefault(rec.logger())
	t.Cleanup(func() { slog.SetDefault(prev) })

	for _, tc := range []struct {
		name   string
		key    keyfuncs.Func // nil: the default, the socket peer's address
		header http.Header
		status int // 0: the request passes
		msg    string
	}{
		{"no user", noUserKey(t), nil, http.StatusBadRequest, msgFirstNoKey},
		{"user ID of an unusable type", idTypeKey, nil, http.StatusInternalServerError, msgFirstIDType},
		{"proxy header, no proxy trusted", nil, http.Header{"X-Forwarded-For": {"198.51.100.9"}}, 0,
			"keyfuncs: a request came with X-Forwarded-For or Forwarded, but the ClientIP trusts no proxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.mu.Lock()
			rec.records = nil
			rec.mu.Unlock()
			ly := layer(core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute})
			ly.Key = tc.key
			f, err := newFlow(t, memStore(t), ly, nil)
			require.NoError(t, err)
			for range 2 {
				r, w := newRequest(), newResponse()
				for k, vs := range tc.header {
					r.header[k] = vs
				}
				assert.Equal(t, tc.status == 0, handle(f, r, w))
				assert.Equal(t, tc.status, w.status)
			}
			var warns []string
			for _, l := range levels(&rec) {
				if strings.HasPrefix(l, "WARN") {
					warns = append(warns, l)
				}
			}
			require.Len(t, warns, 1, "one Warn record for two requests: %v", levels(&rec))
			assert.Contains(t, warns[0], tc.msg)
		})
	}
}

// TestFirstWarnMessagesDocumented: docs/monitoring.md quotes the messages
// of LogErrors' first-occurrence checks exactly.
func TestFirstWarnMessagesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/monitoring.md")
	require.NoError(t, err)
	for _, msg := range []string{msgFirstNoKey, msgFirstIDType} {
		assert.Contains(t, string(doc), "`"+msg+"`")
	}
}
