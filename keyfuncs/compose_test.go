package keyfuncs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
)

var errBoom = errors.New("boom")

func constKey(k string) Func { return func(Request) (string, error) { return k, nil } }

func noKey(Request) (string, error) { return "", ErrNoKey }

func boom(Request) (string, error) { return "", errBoom }

func emptyKey(Request) (string, error) { return "", nil }

func anonymous(context.Context) (string, bool) { return "", false }

func TestCompose(t *testing.T) {
	must := mustFunc(t)
	r := &fakeRequest{remote: "203.0.113.7:1", route: "/users/{id}"}
	ip := must(clientIPKey())

	got, err := must(Compose(Route(), ip))(r)
	require.NoError(t, err)
	assert.Equal(t, "route:GET /users/{id}|ip:203.0.113.7", got)

	got, err = must(Compose(must(Static("a"))))(r)
	require.NoError(t, err)
	assert.Equal(t, "static:a", got, "one part")

	parts := make([]Func, 10) // more than the stack buffer
	for i := range parts {
		parts[i] = constKey("k")
	}
	got, err = must(Compose(parts...))(r)
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("k|", 9)+"k", got, "ten parts")

	cases := map[string]struct {
		fn   Func
		want error
	}{
		"no key":     {must(Compose(Route(), noKey)), ErrNoKey},
		"other":      {must(Compose(boom, Route())), errBoom},
		"empty key":  {must(Compose(Route(), emptyKey)), ErrNoKey},
		"user fails": {must(Compose(Route(), must(User(anonymous)))), ErrNoKey},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := tc.fn(r)
			require.ErrorIs(t, err, tc.want)
			require.Empty(t, got, "key returned with an error")
		})
	}
}

func TestComposeCopiesItsArguments(t *testing.T) {
	must := mustFunc(t)
	parts := []Func{constKey("a"), constKey("b")}
	fn := must(Compose(parts...))
	parts[0] = boom
	got, err := fn(&fakeRequest{})
	require.NoError(t, err)
	assert.Equal(t, "a|b", got)
}

func TestFirstOf(t *testing.T) {
	must := mustFunc(t)
	r := req("203.0.113.7:1", "X-API-Key", "k1")
	chain := must(FirstOf(must(User(anonymous)), must(APIKeyHeader("X-API-Key", nil)), must(clientIPKey())))

	got, err := chain(r)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(got, "key:"), "with an API key: key %q", got)

	got, err = chain(req("203.0.113.7:1"))
	require.NoError(t, err)
	assert.Equal(t, "ip:203.0.113.7", got, "without an API key")

	got, err = must(FirstOf(emptyKey, constKey("b")))(r)
	require.NoError(t, err)
	assert.Equal(t, "b", got, "an empty key is skipped")

	calls := 0
	counting := func(Request) (string, error) { calls++; return "x", nil }
	got, err = must(FirstOf(boom, counting))(r)
	require.ErrorIs(t, err, errBoom, "another error is returned at once")
	assert.NotErrorIs(t, err, ErrNoKey)
	assert.Empty(t, got)
	assert.Zero(t, calls, "functions called after another error")

	got, err = must(FirstOf(noKey, must(User(anonymous)), emptyKey, noKey, noKey))(req("garbage"))
	require.ErrorIs(t, err, ErrNoKey, "all fail")
	assert.Empty(t, got)
	assert.ErrorContains(t, err, "no user in context", "all fail: the error says why")
}

func TestStatic(t *testing.T) {
	got, err := mustFunc(t)(Static("global"))(&fakeRequest{})
	require.NoError(t, err)
	assert.Equal(t, "static:global", got)
}

func TestComposeBadInput(t *testing.T) {
	cases := map[string]func() (Func, error){
		"Compose: none":    func() (Func, error) { return Compose() },
		"Compose: nil":     func() (Func, error) { return Compose(Route(), nil) },
		"Compose: nil one": func() (Func, error) { return Compose(nil) },
		"FirstOf: none":    func() (Func, error) { return FirstOf() },
		"FirstOf: nil":     func() (Func, error) { return FirstOf(noKey, nil) },
		"Static: empty":    func() (Func, error) { return Static("") },
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			fn, err := build()
			requireInvalid(t, fn, err)
		})
	}
}

// TestFirstOfReportsFallback: a FirstOf whose first function never finds
// a key (a user ID stored where it does not look) logs, through
// slog.Default, exactly one line for a thousand requests keyed by its
// fallback, from goroutines at once (run with -race), naming the function
// that found none and the one that keyed; never the key. Another FirstOf
// reports on its own; one that never falls back, or that fails, does not.
func TestFirstOfReportsFallback(t *testing.T) {
	var logs syncbuf.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	must := mustFunc(t)
	type userKey struct{}
	user := must(User(func(ctx context.Context) (string, bool) {
		id, ok := ctx.Value(userKey{}).(string)
		return id, ok
	}))
	chain := must(FirstOf(user, must(clientIPKey())))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 125 {
				got, err := chain(req(fmt.Sprintf("203.0.113.%d:1", (g*125+i)%250)))
				if !assert.NoError(t, err) || !assert.True(t, strings.HasPrefix(got, "ip:"), got) {
					return
				}
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 1, "one line for 1000 fallbacks: %s", logs.String())
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &rec))
	assert.Equal(t, "WARN", rec["level"])
	assert.Contains(t, rec["msg"], "FirstOf fell back")
	assert.Contains(t, rec["no_key"], "function 0: "+ErrNoKey.Error(), "the function that found no key, and why")
	assert.Contains(t, rec["no_key"], "no user in context")
	assert.Equal(t, 1.0, rec["keyed_by_function"])
	assert.Contains(t, rec["first_of"], "compose_test.go:", "where the FirstOf was made")
	assert.NotContains(t, lines[0], "203.0.113.", "never the key")

	// Another FirstOf reports on its own, naming every function skipped.
	second := must(FirstOf(noKey, emptyKey, constKey("k")))
	for range 10 {
		_, err := second(&fakeRequest{})
		require.NoError(t, err)
	}
	lines = strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2, logs.String())
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &rec))
	assert.Contains(t, rec["no_key"], "function 0: ")
	assert.Contains(t, rec["no_key"], "function 1: empty key")
	assert.Equal(t, 2.0, rec["keyed_by_function"])

	// No fallback (the first function keys), or no key at all (an error,
	// which the flow answers): nothing logged.
	quiet := must(FirstOf(constKey("a"), constKey("b")))
	failing := must(FirstOf(noKey, noKey))
	for range 10 {
		_, err := quiet(&fakeRequest{})
		require.NoError(t, err)
		_, err = failing(&fakeRequest{})
		require.ErrorIs(t, err, ErrNoKey)
	}
	assert.Len(t, strings.Split(strings.TrimSpace(logs.String()), "\n"), 2, logs.String())
}

// TestFirstOfFallbackAllocs: once reported, a fallback costs what it did
// before: nothing.
func TestFirstOfFallbackAllocs(t *testing.T) {
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	must := mustFunc(t)
	chain := must(FirstOf(must(User(anonymous)), constKey("k")))
	r := &fakeRequest{}
	_, err := chain(r) // the report
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = chain(r) }))
}
