package httplimit_test

import (
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

// TestLayersPlanPanics: a policy source that panics is a recovered panic,
// 500, whatever the fail mode, reported as in the "limiter"; the request
// takes nothing from any layer.
func TestLayersPlanPanics(t *testing.T) {
	for _, mode := range []time.Duration{0, time.Second} {
		var errs []error
		f, _ := layeredFlow(t, failingClosed(mode, testLayers(t)), []core.Option{core.WithPolicySource(planOf("login", nil))},
			httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }))
		r := withPlan(newPathRequest("POST", "/login"), "panic")
		w := newResponse()
		require.NotPanics(t, func() { assert.False(t, handle(f, r, w)) })
		assert.Equal(t, http.StatusInternalServerError, w.status, "%v", mode)
		assert.Empty(t, w.header.Get("RateLimit"), "%v: no quota told", mode)
		require.Len(t, errs, 1)
		var pe *httplimit.PanicError
		require.ErrorAs(t, errs[0], &pe)
		assert.Equal(t, "limiter", panicIn(pe))
		assert.Equal(t, "plans exploded", pe.Value)

		w = newResponse()
		require.True(t, handle(f, newPathRequest("POST", "/login"), w))
		assert.Equal(t, `"login";r=4;t=55, "all";r=99;t=55`, w.header.Get("RateLimit"), "%v: the panicking request took nothing", mode)
	}
}

// TestLayersOddKeys: a layer whose key function returns "" fails the
// request with keyfuncs.ErrNoKey (400), and the request takes nothing from
// the layers whose keys were good; a 1 MiB key is decided, stored under
// its digest, one state per distinct key.
func TestLayersOddKeys(t *testing.T) {
	ip := clientIPKey(t)
	user := func(r keyfuncs.Request) (string, error) { return r.Header("X-User"), nil }
	layers := []httplimit.Layer{
		{Policy: named("ip", perMin(100)), Key: ip},
		{Policy: named("user", perMin(2)), Key: user},
	}
	var errs []error
	f, _ := layeredFlow(t, layers, nil, httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { errs = append(errs, err) }))
	send := func(u string) *response {
		r := newPathRequest("GET", "/")
		r.header.Set("X-User", u)
		w := newResponse()
		handle(f, r, w)
		return w
	}

	for range 3 {
		w := send("")
		assert.Equal(t, http.StatusBadRequest, w.status)
		assert.Empty(t, w.header.Get("RateLimit"))
	}
	require.Len(t, errs, 3)
	for _, err := range errs {
		assert.ErrorIs(t, err, keyfuncs.ErrNoKey)
	}

	big := strings.Repeat("u", 1<<20)
	other := big[:len(big)-1] + "v"
	for i, want := range []string{
		`"user";r=1;t=55, "ip";r=99;t=55`, // the keyless requests took nothing from ip
		`"user";r=0;t=55, "ip";r=98;t=55`,
	} {
		w := send(big)
		require.Zero(t, w.status, "request %d", i)
		assert.Equal(t, want, w.header.Get("RateLimit"), "request %d", i)
	}
	w := send(big)
	assert.Equal(t, http.StatusTooManyRequests, w.status, "the same 1 MiB key is one client")
	w = send(other)
	assert.Zero(t, w.status, "another 1 MiB key is another client")
	assert.Equal(t, `"user";r=1;t=55, "ip";r=97;t=55`, w.header.Get("RateLimit"))
}

// TestLayerRoutesPadded: a path matches a layer's route as it does once
// padded to more segments than the matcher keeps inline (32) or to more
// bytes than its buffer (512), with segments that normalization removes.
func TestLayerRoutesPadded(t *testing.T) {
	layers := testLayers(t)
	layers[1].Policy.Limit = 1000
	f, _ := layeredFlow(t, layers, nil)
	paths := []string{
		"/login", "/LOGIN/", "/%6Cogin", "/%256Cogin", "/login;x", "/users/42/password", "/admin/a/b/c",
		"/", "/logins", "/users/42", "/api/login",
	}
	pads := map[string]string{
		"40 segments up and down": strings.Repeat("/a", 40) + strings.Repeat("/..", 40),
		"600 slashes":             strings.Repeat("/", 600),
		"400 dots":                strings.Repeat("/.", 400),
		"encoded, 70 segments":    strings.Repeat("/b%2F", 35) + strings.Repeat("/..%2f", 70),
		"past the root":           strings.Repeat("/..", 100),
	}
	for _, path := range paths {
		want := loginCounted(t, f, newPathRequest("POST", path))
		for name, pad := range pads {
			assert.Equal(t, want, loginCounted(t, f, newPathRequest("POST", pad+path)), "POST %s padded with %s", path, name)
		}
	}
	// Deep paths keep their segments past the inline ones.
	deep := strings.Repeat("/x", 40)
	layers[1].Routes = []string{deep[:len(deep)-2] + "/{id}", "/admin/*"}
	f, _ = layeredFlow(t, layers, nil)
	assert.True(t, loginCounted(t, f, newPathRequest("POST", deep)))
	assert.True(t, loginCounted(t, f, newPathRequest("POST", deep[:len(deep)-2]+"/y/")))
	assert.False(t, loginCounted(t, f, newPathRequest("POST", deep+"/x")))
	assert.False(t, loginCounted(t, f, newPathRequest("POST", deep[:len(deep)-2])))
	assert.True(t, loginCounted(t, f, newPathRequest("POST", deep+strings.Repeat("/..", 40)+"/admin")))
}
