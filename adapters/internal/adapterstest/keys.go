package adapterstest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/syncbuf"
	"github.com/apigate/ratelimit/keyfuncs"
)

// MustKeyFunc returns a function that unwraps what a key function
// constructor returns, failing t when the constructor fails:
// MustKeyFunc(t)(ginlimit.User("user")).
func MustKeyFunc(t testing.TB) func(keyfuncs.Func, error) keyfuncs.Func {
	return func(fn keyfuncs.Func, err error) keyfuncs.Func {
		t.Helper()
		require.NoError(t, err, "key function constructor")
		require.NotNil(t, fn, "key function constructor")
		return fn
	}
}

// CheckInvalidKeyFunc returns a function that checks what a key function
// constructor returned for bad input: no function, and an error wrapping
// core.ErrInvalidOption:
// CheckInvalidKeyFunc(t)(ginlimit.User(nil)).
func CheckInvalidKeyFunc(t testing.TB) func(keyfuncs.Func, error) {
	return func(fn keyfuncs.Func, err error) {
		t.Helper()
		assert.Nil(t, fn, "the function of a constructor given bad input")
		assert.ErrorIs(t, err, core.ErrInvalidOption)
	}
}

// KeyLog records the keys a key function returns. It is safe for
// concurrent use; the zero KeyLog is empty and ready.
type KeyLog struct {
	mu   sync.Mutex
	keys []string
}

// Wrap returns fn, recording each key it returns ("" with an error).
func (k *KeyLog) Wrap(fn keyfuncs.Func) keyfuncs.Func {
	return func(r keyfuncs.Request) (string, error) {
		key, err := fn(r)
		k.mu.Lock()
		k.keys = append(k.keys, key)
		k.mu.Unlock()
		return key, err
	}
}

// Keys returns the keys recorded so far, oldest first.
func (k *KeyLog) Keys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.keys)
}

// UserHeader is the request header from which the stand-in authentication
// middleware of a CheckUserKey app takes the user ID.
const UserHeader = "X-Test-User"

// ClaimsPrefix marks a UserHeader value that the stand-in authentication
// middleware stores as Claims, not as a string (see UserValue).
const ClaimsPrefix = "claims:"

// Claims is what the stand-in authentication middleware stores for a
// UserHeader value with ClaimsPrefix, as a JWT middleware stores its
// token's claims: a struct that holds the user ID, of a type no user
// helper can key.
type Claims struct{ Subject string }

// UserValue is what the stand-in authentication middleware of a
// CheckUserKey app stores for the UserHeader value id: id itself, or the
// Claims of the rest of it when it starts with ClaimsPrefix.
func UserValue(id string) any {
	if sub, ok := strings.CutPrefix(id, ClaimsPrefix); ok {
		return Claims{Subject: sub}
	}
	return id
}

// userStep is a request of CheckUserKey, by user ("": none), and the
// status it must get.
type userStep struct {
	path, user string
	status     int
}

// CheckUserKey checks an adapter's user-key helper (ginlimit.User,
// fiberlimit.User, ...) end to end. build returns an app that
// runs, for every request: a stand-in authentication middleware storing
// UserValue of the UserHeader value, when the request has one, where user
// looks for it; then the adapter's New(m.Flow); then handlers
// answering 200 on "/" and "/health". m allows one request a minute per
// key, keyed by user. When skip is not nil it is among m.Flow's options and must
// exempt "/health" (httplimit.WithSkip, reading the framework's context).
//
// Alice is let in then denied, Bob has a quota of his own, a request with
// no user is answered 400 (keyfuncs.ErrNoKey), and, with skip, "/health"
// is served without ever calling the key function.
//
// Then the usual chain, checkUserFallback: a second app from build, keyed
// by keyfuncs.FirstOf(user, client address). Last, checkUserIDType: a
// user stored as Claims, whose requests get claimsStatus.
func CheckUserKey(t *testing.T, user keyfuncs.Func, skip httplimit.Option, claimsStatus int, build func(m Mount) App) {
	t.Helper()
	var log KeyLog
	opts := []httplimit.Option{
		httplimit.WithErrorHandler(func(keyfuncs.Request, error) {}), // no user is expected
	}
	steps := []userStep{{"/", "alice", 200}, {"/", "alice", 429}, {"/", "bob", 200}, {"/", "", 400}}
	if skip != nil {
		opts = append(opts, skip)
		steps = append(steps, userStep{"/health", "", 200}, userStep{"/health", "", 200})
	}
	app := build(FixedMount(t, 1, log.Wrap(user), opts...))

	var got, want []int
	for _, s := range steps {
		req := Request{Method: "GET", Path: s.path, RemoteAddr: peerA}
		if s.user != "" {
			req.Header = http.Header{UserHeader: {s.user}}
		}
		got = append(got, app.Do(t, req).Status)
		want = append(want, s.status)
	}
	require.Equal(t, want, got, "statuses of %v", steps)
	assert.Equal(t, []string{"user:alice", "user:alice", "user:bob", ""}, log.Keys(), "keys")

	checkUserFallback(t, user, build)
	checkUserIDType(t, user, claimsStatus, build)
}

// checkUserFallback checks the chain that keys users by the ID the
// framework stores and everyone else by address,
// keyfuncs.FirstOf(user, client address), one request a minute per key,
// through the app build returns (see CheckUserKey). Two users from one
// address get a quota each, neither spent by the other nor by anonymous
// requests from that address; an anonymous request is keyed by its
// address; and FirstOf's fallback is reported once, as one Warn line on
// slog.Default (a real JSON handler here) for every anonymous request of
// the test, naming no key. A user helper looking where the framework does
// not store the user would show here as every request keyed by address.
func checkUserFallback(t *testing.T, user keyfuncs.Func, build func(m Mount) App) {
	t.Helper()
	var logs syncbuf.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	client, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	key := MustKeyFunc(t)(keyfuncs.FirstOf(user, client.Key))
	var log KeyLog
	app := build(FixedMount(t, 1, log.Wrap(key)))

	type step struct {
		peer, user string
		status     int
		key        string
	}
	ipA, ipB := "ip:"+strings.Split(peerA, ":")[0], "ip:"+strings.Split(peerB, ":")[0]
	steps := []step{
		{peerA, "alice", 200, "user:alice"},
		{peerA, "alice", 429, "user:alice"},
		{peerA, "bob", 200, "user:bob"}, // same address, a quota of his own
		{peerA, "", 200, ipA},           // anonymous: by address, untouched by the users
		{peerA, "", 429, ipA},
		{peerB, "", 200, ipB},
		{peerA, "bob", 429, "user:bob"},
		{peerB, "carol", 200, "user:carol"},
	}
	var got, want []int
	var wantKeys []string
	for _, s := range steps {
		req := Request{Method: "GET", Path: "/", RemoteAddr: s.peer}
		if s.user != "" {
			req.Header = http.Header{UserHeader: {s.user}}
		}
		got = append(got, app.Do(t, req).Status)
		want = append(want, s.status)
		wantKeys = append(wantKeys, s.key)
	}
	require.Equal(t, want, got, "statuses of %v", steps)
	assert.Equal(t, wantKeys, log.Keys(), "keys")

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 1, "one line for three anonymous requests: %s", logs.String())
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &rec), lines[0])
	assert.Equal(t, "WARN", rec["level"], lines[0])
	assert.Contains(t, rec["msg"], "FirstOf fell back", lines[0])
	assert.Equal(t, 1.0, rec["keyed_by_function"], "the address keyed it: %s", lines[0])
	assert.Contains(t, rec["no_key"], "no user in", "the user helper found none: %s", lines[0])
	for _, k := range []string{ipA, ipB, "alice", "bob", "carol"} {
		assert.NotContains(t, lines[0], strings.TrimPrefix(k, "ip:"), "never a key or user")
	}
}

// The Warn records of httplimit.LogErrors' first-occurrence checks that
// a user stored as Claims meets, by the status its requests get: 500,
// under a helper that reads the value as the framework stores it (the
// adapters' User), which reports its type; 400, under keyfuncs.User,
// whose getter returns a string and so finds no user.
var claimsWarns = map[int]string{
	http.StatusInternalServerError: "ratelimit: user ID of an unusable type, the first (later ones are logged at Debug): " +
		"a user ID must be a string, an integer or a fmt.Stringer",
	http.StatusBadRequest: "ratelimit: no key in request, the first (later ones are logged at Debug): " +
		"if every request should have a key, mount the limiter after the middleware that sets it",
}

// checkUserIDType checks, through an app from build (see CheckUserKey)
// whose Flow logs with the default ErrorHandler on slog.Default, a user
// stored as Claims, not as an ID: its two requests get status (500 or
// 400, see claimsWarns) and no key, and write one Warn record naming the
// fix, then one at Debug, never holding the user's ID; a user stored as a
// string is still keyed.
func checkUserIDType(t *testing.T, user keyfuncs.Func, status int, build func(m Mount) App) {
	t.Helper()
	warn, ok := claimsWarns[status]
	require.True(t, ok, "status %d for a user stored as Claims: want 500 or 400", status)
	logs := new(logRecorder)
	prev := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(prev) })

	var log KeyLog
	app := build(FixedMount(t, 10, log.Wrap(user)))
	var got []int
	for _, id := range []string{ClaimsPrefix + "alice-7f3a", ClaimsPrefix + "alice-7f3a", "bob"} {
		req := Request{Method: "GET", Path: "/", RemoteAddr: peerA, Header: http.Header{UserHeader: {id}}}
		got = append(got, app.Do(t, req).Status)
	}
	require.Equal(t, []int{status, status, http.StatusOK}, got, "statuses: Claims twice, then a string")
	assert.Equal(t, []string{"", "", "user:bob"}, log.Keys(), "keys")

	recs := logs.all()
	require.Len(t, recs, 2, "one record for each request refused: %+v", recs)
	assert.Equal(t, slog.LevelWarn, recs[0].level, "the first: %+v", recs[0])
	assert.True(t, strings.HasPrefix(recs[0].msg, warn), "the first names the fix: %q", recs[0].msg)
	assert.Equal(t, slog.LevelDebug, recs[1].level, "the second: %+v", recs[1])
	for _, r := range recs {
		assert.NotContains(t, fmt.Sprint(r), "alice-7f3a", "never the user's ID")
	}
}
