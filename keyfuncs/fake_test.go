package keyfuncs

import (
	"context"
	"net/textproto"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// fakeRequest is a Request built from literals, for tests.
type fakeRequest struct {
	remote  string
	headers map[string][]string // canonical names
	method  string
	route   string
	path    string
	ctx     context.Context
}

var _ Request = (*fakeRequest)(nil)

func (r *fakeRequest) RemoteAddr() string { return r.remote }

func (r *fakeRequest) Header(name string) string {
	if v := r.HeaderValues(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (r *fakeRequest) HeaderValues(name string) []string {
	return r.headers[textproto.CanonicalMIMEHeaderKey(name)]
}

func (r *fakeRequest) Method() string {
	if r.method == "" {
		return "GET"
	}
	return r.method
}

func (r *fakeRequest) Route() string  { return r.route }
func (r *fakeRequest) Unrouted() bool { return r.route == "" }

func (r *fakeRequest) Path() string { return r.path }

func (r *fakeRequest) Context() context.Context {
	if r.ctx == nil {
		return context.Background()
	}
	return r.ctx
}

// req returns a request from peer with headers given as name, value
// pairs; a name given twice makes two header lines.
func req(peer string, kv ...string) *fakeRequest {
	r := &fakeRequest{remote: peer, headers: map[string][]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		name := textproto.CanonicalMIMEHeaderKey(kv[i])
		r.headers[name] = append(r.headers[name], kv[i+1])
	}
	return r
}

// clientIPKey returns the Key of the ClientIP of opts, as a Func, for
// tables of key functions.
func clientIPKey(opts ...IPOption) (Func, error) {
	c, err := NewClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return c.Key, nil
}

// mustFunc returns a function that unwraps what a constructor returns,
// failing t when the constructor fails, so that tables can hold key
// functions: must := mustFunc(t); must(APIKeyHeader("X-API-Key", nil)).
func mustFunc(t testing.TB) func(Func, error) Func {
	return func(fn Func, err error) Func {
		t.Helper()
		require.NoError(t, err)
		require.NotNil(t, fn)
		return fn
	}
}

// requireInvalid checks what a constructor returned for bad input: no
// function and an error wrapping core.ErrInvalidOption, not ErrNoKey.
func requireInvalid(t testing.TB, fn Func, err error) {
	t.Helper()
	require.ErrorIs(t, err, core.ErrInvalidOption)
	require.NotErrorIs(t, err, ErrNoKey, "a misconfiguration must not look like a request without a key")
	require.Nil(t, fn, "function returned with an error")
}
