package keyfuncs

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoute(t *testing.T) {
	cases := []struct {
		method, route, want string
	}{
		{"GET", "/users/{id}", "route:GET /users/{id}"},
		{"DELETE", "/users/:id", "route:DELETE /users/:id"},
		{"PATCH", "/x", "route:PATCH /x"},
		{"GET", "", "route:GET <unmatched>"},
		{"POST", "", "route:POST <unmatched>"},
		{"get", "/x", "route:OTHER /x"},
		{"PROPFIND", "/x", "route:OTHER /x"},
		{strings.Repeat("X", 1<<16), "", "route:OTHER <unmatched>"},
		{"GET\r\nX: y", "/x", "route:OTHER /x"},
		{"", "/x", "route:OTHER /x"},
	}
	for _, tc := range cases {
		r := &fakeRequest{method: tc.method, route: tc.route}
		if tc.method == "" {
			r.method = "\x00" // fakeRequest defaults "" to GET
		}
		got, err := Route()(r)
		if assert.NoError(t, err, "method %.20q, route %q", tc.method, tc.route) {
			assert.Equal(t, tc.want, got, "method %.20q, route %q", tc.method, tc.route)
		}
	}
	got, err := Route()(&fakeRequest{route: "/" + strings.Repeat("a", maxRouteLen)})
	require.ErrorIs(t, err, ErrNoKey, "over-long pattern")
	require.Empty(t, got)
}
