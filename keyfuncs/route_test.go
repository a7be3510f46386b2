package keyfuncs

import (
	"errors"
	"strings"
	"testing"
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
		if err != nil || got != tc.want {
			t.Errorf("%.20q %q: = %q, %v; want %q", tc.method, tc.route, got, err, tc.want)
		}
	}
	r := &fakeRequest{route: "/" + strings.Repeat("a", MaxRouteLen)}
	if got, err := Route()(r); got != "" || !errors.Is(err, ErrNoKey) {
		t.Errorf("over-long pattern: = %q, %v", got, err)
	}
}
