package httplimit_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/httplimit"
)

// TestFlowInfo: what the describers read of a Flow is what it was built
// from, and a layer applies to a method and path as the flow matches them.
func TestFlowDescribed(t *testing.T) {
	f, err := httplimit.New(memStore(t), testLayers(t), httplimit.WithQuota("/rate_limit"), httplimit.WithProblemDetails())
	require.NoError(t, err)
	layers := f.Layers()
	require.Len(t, layers, 2)
	assert.Equal(t, "/rate_limit", f.Quota())
	assert.True(t, f.ProblemDetails())
	assert.False(t, f.Lists())
	login := layers[1]
	assert.Equal(t, "login", login.Policy.Name)
	assert.Equal(t, []string{"POST"}, login.Methods)
	assert.Equal(t, []string{"/login", "/users/{id}/password", "/admin/*"}, login.Routes)
	assert.True(t, f.Applies(1, newPathRequest("POST", "/login")))
	assert.True(t, f.Applies(1, newPathRequest("POST", "/users/{id}/password")), "a template's parameter is a segment")
	assert.True(t, f.Applies(1, newPathRequest("POST", "/admin/users")))
	assert.False(t, f.Applies(1, newPathRequest("GET", "/login")))
	assert.False(t, f.Applies(1, newPathRequest("POST", "/users")))
	assert.True(t, f.Applies(0, newPathRequest("DELETE", "/anything")))
}
