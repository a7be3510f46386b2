package adapterstest

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

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/keyfuncs"
)

// problemBody is an RFC 9457 problem details object with the IETF
// RateLimit draft's extension member.
type problemBody struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

// RunProblemDetails checks httplimit.WithProblemDetails over real sockets:
// a client that asks for application/problem+json gets problem details
// with the draft's problem types on a 429 (every layer that refused named
// in violated-policies), a 503 under FailClosed with the store down and a
// 403 for a deny-listed key, with the header fields set as for any
// denial; a client that does not ask gets the default JSON body.
func RunProblemDetails(t *testing.T, h SocketHarness) {
	clientIP, err := keyfuncs.NewClientIP()
	require.NoError(t, err)
	user := func(r keyfuncs.Request) (string, error) {
		if u := r.Header("X-User"); u != "" {
			return "user:" + u, nil
		}
		return "", keyfuncs.ErrNoKey
	}
	userOrIP, err := keyfuncs.FirstOf(user, clientIP.Key)
	require.NoError(t, err)
	entry, err := access.ParseEntry("user:mallory reason=scraping")
	require.NoError(t, err)
	deny, err := access.NewList(entry)
	require.NoError(t, err)
	layers := []httplimit.Layer{
		{Policy: fixed("all", 1000), Key: clientIP.Key},
		{Policy: fixed("user", 3), Key: userOrIP},
		{Policy: core.Policy{Name: "login", Algorithm: core.FixedWindow, Limit: 2, Window: time.Hour},
			Methods: []string{"POST"}, Routes: []string{"/login"}, Key: clientIP.Key},
	}
	// The store decides at T0 (03:04:05): at the real clock's last minute
	// of an hour, the minute's and the hour's windows would end together,
	// and the login's denial would no longer last longest.
	f := NewFlow(t, clockstore.At(NewStore(t), T0), layers, nil, httplimit.WithProblemDetails(),
		httplimit.WithClientIP(clientIP), httplimit.WithDenyList(deny), httplimit.WithHeaders(layersHeaders))
	addr := h.Serve(t, &Spec{Global: []Mount{{Flow: f}}, Routes: []Route{{Method: "GET", Path: "/"}, {Method: "POST", Path: "/login"}}})
	asking := http.Header{"Accept": {"application/json;q=0.9, application/problem+json"}}
	send := func(method, path, u string, hdr http.Header) Response {
		hdr = hdr.Clone()
		if hdr == nil {
			hdr = http.Header{}
		}
		hdr.Set("X-User", u)
		return Send(t, addr, RawRequest{Method: method, Path: path, Header: hdr})
	}

	// Two logins pass; the third is refused by the login layer alone.
	for range 2 {
		require.Equal(t, http.StatusOK, send("POST", "/login", "ann", nil).Status)
	}
	res := send("POST", "/login", "ann", asking)
	p := checkProblem(t, res, http.StatusTooManyRequests, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	assert.Equal(t, []string{"login"}, p.ViolatedPolicies)
	assert.NotEmpty(t, res.Header.Get("Retry-After"))
	assert.Equal(t, "Too many requests, retry after "+res.Header.Get("Retry-After")+" seconds.", p.Detail)
	assert.Contains(t, res.Header.Get("RateLimit"), `"login";r=0`, "the structured fields as for any denial")

	// ann spends the last of her user quota (3: two logins, this GET); a
	// login now is refused by both the user and the login layers, the
	// binding one first.
	require.Equal(t, http.StatusOK, send("GET", "/", "ann", nil).Status)
	res = send("POST", "/login", "ann", asking)
	p = checkProblem(t, res, http.StatusTooManyRequests, "https://iana.org/assignments/http-problem-types#quota-exceeded")
	assert.ElementsMatch(t, []string{"login", "user"}, p.ViolatedPolicies)
	assert.Equal(t, "login", p.ViolatedPolicies[0], "the hour-long login denial binds")

	// Not asking: the default body, on the same refusal.
	res = send("POST", "/login", "ann", http.Header{"Accept": {"*/*"}})
	require.Equal(t, http.StatusTooManyRequests, res.Status)
	assert.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), "application/json"), res.Header.Get("Content-Type"))
	assert.Contains(t, res.Body, `"error":"rate_limit_exceeded"`)

	// A deny-listed key: 403 about:blank, nothing of the entry told.
	res = send("GET", "/", "mallory", asking)
	checkProblem(t, res, http.StatusForbidden, "about:blank")
	assert.NotContains(t, res.Body, "scraping")

	// The store down under FailClosed: 503 temporary-reduced-capacity.
	closed := core.Policy{Name: "api", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, FailClosed: 3 * time.Second}
	down := NewFlow(t, failingStore{}, []httplimit.Layer{{Policy: closed}}, nil, httplimit.WithProblemDetails(),
		httplimit.WithErrorHandler(func(keyfuncs.Request, error) {}))
	addr = h.Serve(t, &Spec{Global: []Mount{{Flow: down}}, Routes: []Route{{Method: "GET", Path: "/"}}})
	res = Send(t, addr, RawRequest{Header: asking})
	p = checkProblem(t, res, http.StatusServiceUnavailable, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity")
	assert.Equal(t, []string{"api"}, p.ViolatedPolicies)
	assert.Equal(t, "3", res.Header.Get("Retry-After"))
}

// checkProblem checks that res is problem details of status and typ, as
// RFC 9457 has them (Section 3: its members, of their types, and no
// other; the status member the response's; Section 6.1: the media type),
// and returns them.
func checkProblem(t *testing.T, res Response, status int, typ string) problemBody {
	t.Helper()
	require.Equal(t, status, res.Status, "body %s", res.Body)
	ct := res.Header.Get("Content-Type")
	assert.True(t, strings.HasPrefix(ct, "application/problem+json"), "Content-Type %q", ct)
	dec := json.NewDecoder(strings.NewReader(res.Body))
	dec.DisallowUnknownFields()
	var p problemBody
	require.NoError(t, dec.Decode(&p), res.Body)
	assert.Equal(t, status, p.Status)
	assert.Equal(t, typ, p.Type)
	assert.NotEmpty(t, p.Title)
	assert.NotEmpty(t, p.Detail)
	return p
}

// failingStore is a store that is down.
type failingStore struct{}

var errStoreDown = errors.New("adapterstest: the store is down")

func (failingStore) Take(context.Context, time.Time, []core.Request, []core.Decision) (time.Time, error) {
	return time.Time{}, errStoreDown
}
func (failingStore) Peek(context.Context, time.Time, []core.Request, []core.Decision) error {
	return errStoreDown
}
func (failingStore) Refund(context.Context, time.Time, []core.Request) error { return errStoreDown }
func (failingStore) Reset(context.Context, string, core.Policy) error        { return errStoreDown }
