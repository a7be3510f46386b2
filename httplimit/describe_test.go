package httplimit_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/glue/flowinfo"
)

// TestFlowInfo: what the describers read of a Flow is what it was built
// from, and a layer applies to a method and path as the flow matches them.
func TestFlowInfo(t *testing.T) {
	f, err := httplimit.New(memStore(t), testLayers(t), httplimit.WithQuota("/rate_limit"), httplimit.WithProblemDetails())
	require.NoError(t, err)
	info := flowinfo.Of(f)
	require.Len(t, info.Layers, 2)
	assert.Equal(t, "/rate_limit", info.Quota)
	assert.True(t, info.Problems)
	assert.False(t, info.Lists)
	login := info.Layers[1]
	assert.Equal(t, "login", login.Policy.Name)
	assert.Equal(t, []string{"POST"}, login.Methods)
	assert.Equal(t, []string{"/login", "/users/{id}/password", "/admin/*"}, login.Routes)
	assert.True(t, login.Applies(newPathRequest("POST", "/login")))
	assert.True(t, login.Applies(newPathRequest("POST", "/users/{id}/password")), "a template's parameter is a segment")
	assert.True(t, login.Applies(newPathRequest("POST", "/admin/users")))
	assert.False(t, login.Applies(newPathRequest("GET", "/login")))
	assert.False(t, login.Applies(newPathRequest("POST", "/users")))
	assert.True(t, info.Layers[0].Applies(newPathRequest("DELETE", "/anything")))
}
