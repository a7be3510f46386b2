package httplimit_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/keyfuncs"
)

// quotaLayer is one layer of the quota endpoint's answer, decoded
// strictly.
type quotaLayer struct {
	Name       string   `json:"name"`
	Algorithm  string   `json:"algorithm"`
	Limit      int64    `json:"limit"`
	Remaining  int64    `json:"remaining"`
	Used       int64    `json:"used"`
	Reset      int64    `json:"reset"`
	ResetAfter int64    `json:"reset_after"`
	Window     float64  `json:"window"`
	RetryAfter int64    `json:"retry_after"`
	LockedOut  bool     `json:"locked_out"`
	Methods    []string `json:"methods"`
	Routes     []string `json:"routes"`
}

// quotaOf decodes w as the quota endpoint's answer, by layer name.
func quotaOf(t *testing.T, w *response) map[string]quotaLayer {
	t.Helper()
	require.Equal(t, 200, w.status, w.body)
	require.Equal(t, "application/json", w.contentType)
	assert.Equal(t, "no-store", w.header.Get("Cache-Control"))
	dec := json.NewDecoder(strings.NewReader(w.body))
	dec.DisallowUnknownFields()
	var body struct {
		Layers []quotaLayer `json:"layers"`
	}
	require.NoError(t, dec.Decode(&body), w.body)
	out := map[string]quotaLayer{}
	now := time.Now().Unix()
	for _, l := range body.Layers {
		// reset is the Unix time of reset_after from now, rounded up: it
		// may tick from one call to the next, so it is checked here and
		// left out of what callers compare.
		assert.InDelta(t, now+l.ResetAfter, l.Reset, 2, "%s: reset is reset_after from now", l.Name)
		l.Reset = 0
		out[l.Name] = l
	}
	return out
}

// quotaLayers: every request costs the "all" layer 1; POST /login is its
// own layer with a lockout; a "user" layer on /me is keyed by X-User
// ("user:", a client's key, which the quota endpoint shows).
func quotaLayers(t *testing.T) []httplimit.Layer {
	ip := clientIPKey(t)
	user := func(r keyfuncs.Request) (string, error) {
		if u := r.Header("X-User"); u != "" {
			return "user:" + u, nil
		}
		return "", keyfuncs.ErrNoKey
	}
	login := named("login", core.Policy{Algorithm: core.FixedWindow, Limit: 2, Window: time.Hour, Lockout: time.Minute})
	return []httplimit.Layer{
		{Policy: named("all", perMin(100)), Key: ip},
		{Policy: named("login", login), Methods: []string{"POST"}, Routes: []string{"/login"}, Key: ip},
		{Policy: named("user", core.Policy{Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 20}), Routes: []string{"/me"}, Key: user},
	}
}

// TestQuotaEndpoint: GET /rate_limit answers every layer of the caller,
// under the layer's own key, with routes and methods, a lockout and the
// next decision's Remaining, and spends nothing; other methods on the path
// are limited as any request.
func TestQuotaEndpoint(t *testing.T) {
	f, err := httplimit.New(clockstore.At(memStore(t), t0), quotaLayers(t), httplimit.WithQuota("/rate_limit"))
	require.NoError(t, err)
	quota := func(path string) map[string]quotaLayer {
		w := newResponse()
		require.False(t, handle(f, newPathRequest("GET", path), w), "the endpoint never proceeds")
		return quotaOf(t, w)
	}
	q := quota("/rate_limit")
	require.Len(t, q, 2, "no X-User: the user layer has no key, and is left out")
	assert.Equal(t, quotaLayer{Name: "all", Algorithm: "fixed_window", Limit: 100, Remaining: 100, Window: 60}, q["all"])
	assert.Equal(t, []string{"POST"}, q["login"].Methods)
	assert.Equal(t, []string{"/login"}, q["login"].Routes)

	for range 3 {
		handle(f, newPathRequest("POST", "/login"), newResponse())
	}
	q = quota("/Rate_Limit/")
	assert.Equal(t, int64(98), q["all"].Remaining, "the third login, denied, took nothing")
	assert.Equal(t, int64(2), q["all"].Used)
	assert.Equal(t, int64(55), q["all"].ResetAfter, "t0 is 5 s into its minute")
	assert.True(t, q["login"].LockedOut, "the third login started a lockout")
	assert.Equal(t, int64(3355), q["login"].RetryAfter, "a lockout lasts at least until the window admits again")
	assert.Equal(t, int64(0), q["login"].Remaining)

	before := quota("/rate_limit")
	for range 12 { // within the endpoint's own burst
		quota("/rate_limit")
	}
	assert.Equal(t, before, quota("/rate_limit"), "quota requests spent nothing")
	w := newResponse()
	require.True(t, handle(f, newPathRequest("GET", "/items"), w))
	assert.Equal(t, before["all"].Remaining-1, int64(atoi(t, w.header.Get("X-RateLimit-Remaining"))), "the next decision")

	w = newResponse()
	head := newPathRequest("HEAD", "/rate_limit")
	head.remote = "192.0.2.50:1" // the first address's quota requests are at the endpoint's burst
	require.False(t, handle(f, head, w), "HEAD is answered too")
	assert.Equal(t, int64(100), quotaOf(t, w)["all"].Remaining)
	w = newResponse()
	assert.True(t, handle(f, newPathRequest("POST", "/rate_limit"), w), "POST is not the endpoint")
	for path, is := range map[string]bool{
		"/%72ate_limit": true, "/RATE_LIMIT": true, "//rate_limit/": true, "/rate_limit;x": true, `\rate_limit`: true,
		"/api/rate_limit": false, "/rate_limits": false, "/rate": false, "/%2e%2e/rate_limitx": false,
	} {
		sp := newPathRequest("GET", path)
		sp.remote = "192.0.2.77:1" // an address of its own: the endpoint's burst
		w = newResponse()
		assert.Equal(t, !is, handle(f, sp, w), "%q: the endpoint", path)
	}
	r := newPathRequest("GET", "/rate_limit")
	r.remote = "192.0.2.50:1"
	r.header.Set("X-User", "ann")
	w = newResponse()
	handle(f, r, w)
	assert.Equal(t, int64(20), quotaOf(t, w)["user"].Remaining, "a token bucket's limit is its burst")
}

// TestQuotaEndpointKeyedAsTheFlow: forwarding headers the flow does not
// trust do not change whose quota is shown.
func TestQuotaEndpointKeyedAsTheFlow(t *testing.T) {
	f, err := httplimit.New(clockstore.At(memStore(t), t0), quotaLayers(t), httplimit.WithQuota("/rate_limit"))
	require.NoError(t, err)
	for range 5 {
		handle(f, newPathRequest("GET", "/"), newResponse())
	}
	for _, h := range []string{"X-Forwarded-For", "X-Real-IP", "Forwarded", "True-Client-IP"} {
		r := newPathRequest("GET", "/rate_limit")
		r.header.Set(h, "198.51.100.9")
		if h == "Forwarded" {
			r.header.Set(h, "for=198.51.100.9")
		}
		w := newResponse()
		handle(f, r, w)
		assert.Equal(t, int64(95), quotaOf(t, w)["all"].Remaining, "%s: the socket peer's quota", h)
	}
}

// TestQuotaEndpointGuard: the endpoint takes 20 requests at once from an
// address, then refuses with 429 and Retry-After, without asking the
// store; another address is not refused.
func TestQuotaEndpointGuard(t *testing.T) {
	counting := &countingStore{Store: memStore(t)}
	f, err := httplimit.New(counting, quotaLayers(t), httplimit.WithQuota("/rate_limit"))
	require.NoError(t, err)
	ok, refused := 0, 0
	start := time.Now()
	for range 1000 {
		w := newResponse()
		handle(f, newPathRequest("GET", "/rate_limit"), w)
		switch w.status {
		case 200:
			ok++
		case 429:
			refused++
			assert.Equal(t, "1", w.header.Get("Retry-After"))
		default:
			t.Fatalf("status %d", w.status)
		}
	}
	assert.LessOrEqual(t, ok, 20+int(10*time.Since(start).Seconds())+1, "20 at once, and 10 a second after")
	assert.GreaterOrEqual(t, ok, 20)
	assert.Equal(t, int64(ok), counting.calls.Load(), "refused quota requests ask no store")
	r := newPathRequest("GET", "/rate_limit")
	r.remote = "192.0.2.99:1"
	w := newResponse()
	handle(f, r, w)
	assert.Equal(t, 200, w.status)
}

// TestQuotaEndpointStoreDown: a store that cannot be read is a 503 with
// Retry-After, the ErrorHandler hearing why; never a made-up quota.
func TestQuotaEndpointStoreDown(t *testing.T) {
	var heard []error
	f, err := httplimit.New(failing{}, quotaLayers(t), httplimit.WithQuota("/rate_limit"),
		httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { heard = append(heard, err) }))
	require.NoError(t, err)
	w := newResponse()
	handle(f, newPathRequest("GET", "/rate_limit"), w)
	assert.Equal(t, 503, w.status)
	assert.Equal(t, "1", w.header.Get("Retry-After"))
	assert.Equal(t, `{"error":"quota unavailable"}`, w.body)
	require.Len(t, heard, 1)
	assert.ErrorContains(t, heard[0], "store failed")
}

// TestWithQuotaRejects: a path the option cannot match exactly is an
// error at construction.
func TestWithQuotaRejects(t *testing.T) {
	for _, p := range []string{"", "/", "//", "rate_limit", "/users/{id}", "/api/*", "/a/:b"} {
		_, err := httplimit.New(memStore(t), quotaLayers(t), httplimit.WithQuota(p))
		assert.ErrorIs(t, err, core.ErrInvalidOption, "%q", p)
	}
	_, err := httplimit.New(memStore(t), quotaLayers(t), httplimit.WithQuota("/rate_limit", "all", "nope"))
	assert.ErrorIs(t, err, core.ErrInvalidOption, "a layer to show that no layer is")
	_, err = httplimit.New(memStore(t), quotaLayers(t), httplimit.WithQuota("/rate_limit", "ALL", "user"))
	assert.NoError(t, err, "layer names, in any case")
}

// countingStore counts the calls of a store.
type countingStore struct {
	core.Store
	calls atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, now time.Time, rs []core.Request, out []core.Decision) (time.Time, error) {
	s.calls.Add(1)
	return s.Store.Take(ctx, now, rs, out)
}

func (s *countingStore) Peek(ctx context.Context, now time.Time, rs []core.Request, out []core.Decision) error {
	s.calls.Add(1)
	return s.Store.Peek(ctx, now, rs, out)
}

func (s *countingStore) Refund(ctx context.Context, at time.Time, rs []core.Request) error {
	s.calls.Add(1)
	return s.Store.Refund(ctx, at, rs)
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err, "%q", s)
	return n
}

// TestQuotaEndpointClientLeft: a caller whose request's context has ended
// (it disconnected) gets the Responder's 499, as on any route, never a
// 503 that blames the store.
func TestQuotaEndpointClientLeft(t *testing.T) {
	var heard []error
	f, err := httplimit.New(memStore(t), quotaLayers(t), httplimit.WithQuota("/rate_limit"),
		httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { heard = append(heard, err) }))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := newPathRequest("GET", "/rate_limit")
	r.ctx = ctx
	w := newResponse()
	require.False(t, handle(f, r, w))
	assert.Equal(t, 499, w.status, w.body)
	require.Len(t, heard, 1)
	assert.ErrorIs(t, heard[0], context.Canceled)
}
