package keyfuncs

import (
	"errors"
	"strings"
	"testing"
)

func TestAPIKey(t *testing.T) {
	const raw = "sk_live_s3cr3t"
	plain, err := APIKeyHeader("X-API-Key")(req("", "x-api-key", raw))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(plain, "key:") || len(plain) != 4+32 || strings.Contains(plain, raw) {
		t.Fatalf("key %q: want key: and 32 hex digits, without the raw key", plain)
	}
	// The hex digits are the first 128 bits of SHA-256("sk_live_s3cr3t").
	if want := "key:84dc88e54a7e636eb5186b026cbe51b2"; plain != want {
		t.Fatalf("key %q, want %q", plain, want)
	}

	cases := []struct {
		name string
		fn   Func
		req  *fakeRequest
		want string // "": an error wrapping ErrNoKey
	}{
		{"same key same bucket", APIKeyHeader("X-API-Key"), req("", "X-API-Key", " "+raw+" "), plain},
		{"query", APIKeyQuery("api_key"), &fakeRequest{query: map[string]string{"api_key": raw}}, plain},
		{"bearer", APIKeyHeader("Authorization", Bearer()), req("", "Authorization", "Bearer "+raw), plain},
		{"bearer case", APIKeyHeader("Authorization", Bearer()), req("", "Authorization", "bEaReR  "+raw), plain},
		{"bearer: other scheme", APIKeyHeader("Authorization", Bearer()), req("", "Authorization", "Basic "+raw), ""},
		{"bearer: no token", APIKeyHeader("Authorization", Bearer()), req("", "Authorization", "Bearer "), ""},
		{"bearer: scheme only", APIKeyHeader("Authorization", Bearer()), req("", "Authorization", "Bearer"), ""},
		{"bearer ignored by query", APIKeyQuery("k", Bearer()), &fakeRequest{query: map[string]string{"k": raw}}, plain},
		{"missing", APIKeyHeader("X-API-Key"), req(""), ""},
		{"empty", APIKeyHeader("X-API-Key"), req("", "X-API-Key", "  "), ""},
		{"missing query", APIKeyQuery("api_key"), &fakeRequest{}, ""},
		{"at the cap", APIKeyHeader("X-API-Key"), req("", "X-API-Key", strings.Repeat("a", MaxAPIKeyLen)), "key:"},
		{"over the cap", APIKeyHeader("X-API-Key"), req("", "X-API-Key", strings.Repeat("a", MaxAPIKeyLen+1)), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fn(tc.req)
			switch {
			case tc.want == "":
				if got != "" || !errors.Is(err, ErrNoKey) {
					t.Fatalf("= %q, %v; want an error wrapping ErrNoKey", got, err)
				}
			case err != nil || !strings.HasPrefix(got, tc.want) || len(got) != 36:
				t.Fatalf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestAPIKeySecret(t *testing.T) {
	const raw = "sk_live_s3cr3t"
	r := req("", "X-API-Key", raw)
	plain, _ := APIKeyHeader("X-API-Key")(r)
	secret := []byte("pepper")
	fn := APIKeyHeader("X-API-Key", WithSecret(secret))
	secret[0] = 'X' // WithSecret copied it
	a, errA := fn(r)
	b, errB := APIKeyHeader("X-API-Key", WithSecret([]byte("pepper")))(r)
	c, errC := APIKeyHeader("X-API-Key", WithSecret([]byte("salt")))(r)
	if errA != nil || errB != nil || errC != nil {
		t.Fatal(errA, errB, errC)
	}
	if a != "key:9162c411dbebce5f8f751b697bb8b395" { // HMAC-SHA256("pepper", raw)
		t.Fatalf("HMAC key %q", a)
	}
	if a != b || a == plain || a == c || strings.Contains(a, raw) || len(a) != 36 {
		t.Fatalf("plain %q, pepper %q %q, salt %q", plain, a, b, c)
	}
	// Concurrent use shares pooled HMAC states safely.
	done := make(chan string)
	for range 8 {
		go func() {
			k, _ := fn(r)
			for range 100 {
				if k2, _ := fn(r); k2 != k {
					k = "mismatch"
				}
			}
			done <- k
		}()
	}
	for range 8 {
		if k := <-done; k != a {
			t.Fatalf("concurrent key %q, want %q", k, a)
		}
	}
}

func TestAPIKeyBadOptions(t *testing.T) {
	for name, fn := range map[string]Func{
		"empty header":  APIKeyHeader(""),
		"bad header":    APIKeyHeader("X API Key"),
		"empty query":   APIKeyQuery(""),
		"empty secret":  APIKeyHeader("X-API-Key", WithSecret(nil)),
		"empty secret2": APIKeyQuery("k", WithSecret([]byte{})),
	} {
		_, err := fn(req("", "X-API-Key", "k"))
		if !errors.Is(err, ErrInvalidOption) || errors.Is(err, ErrNoKey) {
			t.Errorf("%s: err %v, want ErrInvalidOption only", name, err)
		}
	}
}
