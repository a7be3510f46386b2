package keyfuncs

import (
	"context"
	"errors"
	"strings"
	"testing"
)

var errBoom = errors.New("boom")

func constKey(k string) Func { return func(Request) (string, error) { return k, nil } }

func noKey(Request) (string, error) { return "", ErrNoKey }

func boom(Request) (string, error) { return "", errBoom }

func emptyKey(Request) (string, error) { return "", nil }

func TestCompose(t *testing.T) {
	r := &fakeRequest{remote: "203.0.113.7:1", route: "/users/{id}"}
	ip, _ := IP()
	got, err := Compose(Route(), ip)(r)
	if err != nil || got != "route:GET /users/{id}|ip:203.0.113.7" {
		t.Fatalf("= %q, %v", got, err)
	}
	if got, err := Compose(Static("a"))(r); got != "static:a" || err != nil {
		t.Fatalf("one part: = %q, %v", got, err)
	}
	parts := make([]Func, 10) // more than the stack buffer
	for i := range parts {
		parts[i] = constKey("k")
	}
	if got, err := Compose(parts...)(r); err != nil || got != strings.Repeat("k|", 9)+"k" {
		t.Fatalf("ten parts: = %q, %v", got, err)
	}
	for name, tc := range map[string]struct {
		fn   Func
		want error
	}{
		"no key":     {Compose(Route(), noKey), ErrNoKey},
		"other":      {Compose(boom, Route()), errBoom},
		"empty key":  {Compose(Route(), emptyKey), ErrNoKey},
		"no parts":   {Compose(), ErrInvalidOption},
		"nil part":   {Compose(Route(), nil), ErrInvalidOption},
		"user fails": {Compose(Route(), User(func(context.Context) (string, bool) { return "", false })), ErrNoKey},
	} {
		if got, err := tc.fn(r); got != "" || !errors.Is(err, tc.want) {
			t.Errorf("%s: = %q, %v; want %v", name, got, err, tc.want)
		}
	}
}

func TestFirstOf(t *testing.T) {
	r := req("203.0.113.7:1", "X-API-Key", "k1")
	ip, _ := IP()
	anonymous := func(context.Context) (string, bool) { return "", false }
	chain := FirstOf(User(anonymous), APIKeyHeader("X-API-Key"), ip)
	if got, err := chain(r); err != nil || !strings.HasPrefix(got, "key:") {
		t.Fatalf("api key: = %q, %v", got, err)
	}
	if got, err := chain(req("203.0.113.7:1")); err != nil || got != "ip:203.0.113.7" {
		t.Fatalf("ip: = %q, %v", got, err)
	}
	if got, err := FirstOf(emptyKey, constKey("b"))(r); err != nil || got != "b" {
		t.Fatalf("empty key skipped: = %q, %v", got, err)
	}

	calls := 0
	counting := func(Request) (string, error) { calls++; return "x", nil }
	got, err := FirstOf(boom, counting)(r)
	if got != "" || !errors.Is(err, errBoom) || errors.Is(err, ErrNoKey) || calls != 0 {
		t.Fatalf("other error: = %q, %v, calls %d; want errBoom at once", got, err, calls)
	}

	got, err = FirstOf(noKey, User(anonymous), emptyKey, noKey, noKey)(req("garbage"))
	if got != "" || !errors.Is(err, ErrNoKey) {
		t.Fatalf("all fail: = %q, %v", got, err)
	}
	if !strings.Contains(err.Error(), "no user in context") {
		t.Errorf("all fail: %v does not say why", err)
	}
	for name, fn := range map[string]Func{"none": FirstOf(), "nil": FirstOf(noKey, nil)} {
		if _, err := fn(r); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: err %v, want ErrInvalidOption", name, err)
		}
	}
}

func TestStatic(t *testing.T) {
	for key, want := range map[string]string{"global": "static:global", "": "static:"} {
		if got, err := Static(key)(&fakeRequest{}); err != nil || got != want {
			t.Errorf("Static(%q) = %q, %v", key, got, err)
		}
	}
}
