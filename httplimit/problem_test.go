package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// problem is an RFC 9457 problem details object with the IETF RateLimit
// draft's extension member, decoded strictly.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

// decodeProblem checks that w is problem details (RFC 9457, Section 3:
// its members, of their types, with no other member; status as the
// response's) and returns them.
func decodeProblem(t *testing.T, w *response) problem {
	t.Helper()
	require.Equal(t, "application/problem+json", w.contentType, "body %s", w.body)
	dec := json.NewDecoder(strings.NewReader(w.body))
	dec.DisallowUnknownFields()
	var p problem
	require.NoError(t, dec.Decode(&p), w.body)
	assert.False(t, dec.More(), "one JSON value")
	assert.Equal(t, w.status, p.Status, "the status member is the response's (RFC 9457, Section 3.1.2)")
	assert.NotEmpty(t, p.Type)
	assert.NotEmpty(t, p.Title)
	return p
}

// withAccept returns r with accept as its Accept field lines.
func withAccept[R interface{ addHeader(k, v string) }](r R, accept ...string) R {
	for _, a := range accept {
		r.addHeader("Accept", a)
	}
	return r
}

func (r *request) addHeader(k, v string) { r.header.Add(k, v) }

// TestProblemDetailsNegotiation: only a client that names
// application/problem+json with a weight above 0 gets problem details;
// every other one gets the Responder's body, as without the option.
func TestProblemDetailsNegotiation(t *testing.T) {
	f, err := newFlow(t, memStore(t), layer(perMinute), nil, httplimit.WithProblemDetails())
	require.NoError(t, err)
	require.True(t, handle(f, newRequest(), newResponse()))
	for _, c := range []struct {
		accept  []string
		problem bool
	}{
		{nil, false},
		{[]string{"*/*"}, false},
		{[]string{"application/*"}, false},
		{[]string{"application/json"}, false},
		{[]string{"application/problem+json"}, true},
		{[]string{"Application/Problem+JSON"}, true},
		{[]string{"application/json, application/problem+json;q=0.5"}, true},
		{[]string{"text/html", "application/problem+json"}, true},
		{[]string{"application/problem+json;q=0"}, false},
		{[]string{"application/problem+json; q=0.000"}, false},
		{[]string{"application/problem+json;q=banana"}, false},
		{[]string{"application/problem+json;q=2"}, false},
		{[]string{"application/problem+jsonx"}, false},
		{[]string{strings.Repeat("text/plain, ", 100) + "application/problem+json"}, false}, // past the members read
	} {
		w := newResponse()
		require.False(t, handle(f, withAccept(newRequest(), c.accept...), w))
		assert.Equal(t, http.StatusTooManyRequests, w.status, "%q", c.accept)
		assert.Equal(t, 1, w.writes)
		assert.NotEmpty(t, w.header.Get("Retry-After"), "%q: the fields are set as for any denial", c.accept)
		if !c.problem {
			assert.Equal(t, "application/json", w.contentType, "%q", c.accept)
			assert.Contains(t, w.body, `"error":"rate_limit_exceeded"`)
			continue
		}
		p := decodeProblem(t, w)
		assert.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", p.Type, "%q", c.accept)
		assert.Equal(t, "Quota Exceeded", p.Title)
		assert.Equal(t, []string{"p"}, p.ViolatedPolicies)
		assert.Equal(t, "Too many requests, retry after "+w.header.Get("Retry-After")+" seconds.", p.Detail)
	}

	// Without the option, a client that asks gets the default body.
	plain, err := newFlow(t, memStore(t), layer(perMinute), nil)
	require.NoError(t, err)
	require.True(t, handle(plain, newRequest(), newResponse()))
	w := newResponse()
	require.False(t, handle(plain, withAccept(newRequest(), "application/problem+json"), w))
	assert.Equal(t, "application/json", w.contentType)
}

// TestProblemDetailsLayers: a layered request refused by two layers names
// both in violated-policies, the binding layer first; one refused by one
// layer names that one only.
func TestProblemDetailsLayers(t *testing.T) {
	ip := clientIPKey(t)
	layers := []httplimit.Layer{
		{Policy: named("all", perMin(100)), Key: ip},
		{Policy: named("burst", perMin(2)), Key: ip},
		{Policy: named("login", perMin(3)), Methods: []string{"POST"}, Routes: []string{"/login"}, Key: ip},
	}
	f, _ := layeredFlow(t, layers, nil, httplimit.WithProblemDetails())
	send := func(method, path string) *response {
		w := newResponse()
		handle(f, withAccept(newPathRequest(method, path), "application/problem+json"), w)
		return w
	}
	for range 2 {
		require.Equal(t, 0, send("GET", "/items").status)
	}
	w := send("GET", "/items")
	require.Equal(t, http.StatusTooManyRequests, w.status)
	assert.Equal(t, []string{"burst"}, decodeProblem(t, w).ViolatedPolicies)
	w = send("POST", "/login") // login has room, burst has none
	require.Equal(t, http.StatusTooManyRequests, w.status)
	assert.Equal(t, []string{"burst"}, decodeProblem(t, w).ViolatedPolicies)

	both, _ := layeredFlow(t, []httplimit.Layer{
		{Policy: named("all", perMin(100)), Key: ip},
		{Policy: named("short", core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}), Key: ip},
		{Policy: named("long", core.Policy{Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}), Key: ip},
	}, nil, httplimit.WithProblemDetails())
	require.True(t, handle(both, newPathRequest("GET", "/"), newResponse()))
	w = newResponse()
	require.False(t, handle(both, withAccept(newPathRequest("GET", "/"), "application/problem+json"), w))
	p := decodeProblem(t, w)
	assert.Equal(t, []string{"long", "short"}, p.ViolatedPolicies, "both, the binding (longest) denial first")
	assert.Equal(t, "Too many requests, retry after "+w.header.Get("Retry-After")+" seconds.", p.Detail)
}

// TestProblemDetailsLockoutOutageAndLists: a lockout is abnormal usage,
// a refusal under FailClosed while the store is down is reduced capacity
// (503), a deny-listed client gets 403 about:blank that tells nothing of
// its entry.
func TestProblemDetailsLockoutOutageAndLists(t *testing.T) {
	login := core.Policy{Name: "login", Algorithm: core.SlidingWindowLog, Limit: 2, Window: time.Minute, Lockout: time.Hour}
	f, err := newFlow(t, memStore(t), layer(login), nil, httplimit.WithProblemDetails())
	require.NoError(t, err)
	var last *response
	for range 4 {
		last = newResponse()
		handle(f, withAccept(newRequest(), "application/problem+json"), last)
	}
	p := decodeProblem(t, last)
	assert.Equal(t, http.StatusTooManyRequests, p.Status)
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#abnormal-usage-detected", p.Type)
	assert.Equal(t, "Abnormal Usage Detected", p.Title)
	assert.Equal(t, []string{"login"}, p.ViolatedPolicies)
	assert.True(t, strings.HasPrefix(p.Detail, "Locked out after repeated denials, retry after "), p.Detail)

	closed := core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, FailClosed: 7 * time.Second}
	down, err := httplimit.New(downStore{}, []httplimit.Layer{{Policy: closed}}, httplimit.WithProblemDetails(),
		httplimit.WithErrorHandler(func(keyfuncs.Request, error) {}))
	require.NoError(t, err)
	w := newResponse()
	require.False(t, handle(down, withAccept(newRequest(), "application/problem+json"), w))
	p = decodeProblem(t, w)
	assert.Equal(t, http.StatusServiceUnavailable, p.Status)
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", p.Type)
	assert.Equal(t, []string{"api"}, p.ViolatedPolicies)
	assert.Equal(t, "7", w.header.Get("Retry-After"))
	assert.Equal(t, "Rate limiting is temporarily unavailable, retry after 7 seconds.", p.Detail)

	clientIP, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	for _, ly := range [][]httplimit.Layer{{layer(perMinute)}, testLayers(t)} {
		listed, err := httplimit.New(memStore(t), ly, httplimit.WithProblemDetails(), httplimit.WithClientIP(clientIP),
			httplimit.WithDenyList(list(t, "192.0.2.0/24 reason=scraping")))
		require.NoError(t, err)
		w = newResponse()
		require.False(t, handle(listed, withAccept(newPathRequest("GET", "/"), "application/problem+json"), w))
		assert.Equal(t, http.StatusForbidden, w.status)
		p = decodeProblem(t, w)
		assert.Equal(t, "about:blank", p.Type)
		assert.Equal(t, "Forbidden", p.Title)
		assert.NotContains(t, w.body, "scraping")
		w = newResponse()
		require.False(t, handle(listed, newPathRequest("GET", "/"), w))
		assert.Equal(t, "application/json", w.contentType, "no Accept: the Responder's 403")
	}
}

// downStore is a store that is down.
type downStore struct{}

var errDown = errors.New("dial tcp 127.0.0.1:6379: connection refused")

func (downStore) Take(context.Context, time.Time, []core.Request, []core.Decision) (time.Time, error) {
	return time.Time{}, errDown
}
func (downStore) Peek(context.Context, time.Time, []core.Request, []core.Decision) error {
	return errDown
}
func (downStore) Refund(context.Context, time.Time, []core.Request) error { return errDown }
func (downStore) Reset(context.Context, string, core.Policy) error        { return errDown }
