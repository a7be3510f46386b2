package adapterstest

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/keyfuncs"
)

// CheckUnwrap checks an adapter's Unwrap. param reads, through Unwrap, the
// route parameter "id" from the framework's own value behind r, and
// reports Unwrap's ok. build returns an app serving GET /users/:id (chi:
// /users/{id}) behind New(m.Flow). A request to
// /users/7 must show param "7" to the key function, and a request that
// does not come from the adapter must give ok false.
func CheckUnwrap(t *testing.T, param func(r keyfuncs.Request) (string, bool), build func(m Mount) App) {
	t.Helper()
	_, ok := param(foreignRequest{})
	assert.False(t, ok, "Unwrap of a request not from the adapter")

	type seen struct {
		id string
		ok bool
	}
	var got []seen
	key := func(r keyfuncs.Request) (string, error) {
		id, ok := param(r)
		got = append(got, seen{strings.Clone(id), ok})
		return "k", nil
	}
	app := build(FixedMount(t, 10, key))
	res := app.Do(t, Request{Method: "GET", Path: "/users/7", RemoteAddr: peerA})
	require.Equal(t, 200, res.Status, "body %q", res.Body)
	assert.Equal(t, []seen{{"7", true}}, got, "what the key function saw through Unwrap")
}

// foreignRequest is a keyfuncs.Request of no adapter.
type foreignRequest struct{}

func (foreignRequest) RemoteAddr() string           { return peerA }
func (foreignRequest) Header(string) string         { return "" }
func (foreignRequest) HeaderValues(string) []string { return nil }
func (foreignRequest) Method() string               { return "GET" }
func (foreignRequest) Route() string                { return "" }
func (foreignRequest) Unrouted() bool               { return false }
func (foreignRequest) Path() string                 { return "" }
func (foreignRequest) Context() context.Context     { return context.Background() }
