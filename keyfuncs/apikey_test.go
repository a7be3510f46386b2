package keyfuncs

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAPIKey(t *testing.T) {
	must := mustFunc(t)
	const raw = "sk_live_s3cr3t"
	plain, err := must(APIKeyHeader("X-API-Key"))(req("", "x-api-key", raw))
	require.NoError(t, err)
	// The hex digits are the first 128 bits of SHA-256("sk_live_s3cr3t");
	// the raw key never appears.
	require.Equal(t, "key:84dc88e54a7e636eb5186b026cbe51b2", plain)

	cases := []struct {
		name string
		fn   Func
		req  *fakeRequest
		want string // "": an error wrapping ErrNoKey
	}{
		{"same key same bucket", must(APIKeyHeader("X-API-Key")), req("", "X-API-Key", " "+raw+" "), plain},
		{"query", must(APIKeyQuery("api_key")), &fakeRequest{query: map[string]string{"api_key": raw}}, plain},
		{"bearer", must(APIKeyHeader("Authorization", Bearer())), req("", "Authorization", "Bearer "+raw), plain},
		{"bearer case", must(APIKeyHeader("Authorization", Bearer())), req("", "Authorization", "bEaReR  "+raw), plain},
		{"bearer: other scheme", must(APIKeyHeader("Authorization", Bearer())), req("", "Authorization", "Basic "+raw), ""},
		{"bearer: no token", must(APIKeyHeader("Authorization", Bearer())), req("", "Authorization", "Bearer "), ""},
		{"bearer: scheme only", must(APIKeyHeader("Authorization", Bearer())), req("", "Authorization", "Bearer"), ""},
		{"missing", must(APIKeyHeader("X-API-Key")), req(""), ""},
		{"empty", must(APIKeyHeader("X-API-Key")), req("", "X-API-Key", "  "), ""},
		{"missing query", must(APIKeyQuery("api_key")), &fakeRequest{}, ""},
		{"at the cap", must(APIKeyHeader("X-API-Key")), req("", "X-API-Key", strings.Repeat("a", MaxAPIKeyLen)), "key:"},
		{"over the cap", must(APIKeyHeader("X-API-Key")), req("", "X-API-Key", strings.Repeat("a", MaxAPIKeyLen+1)), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fn(tc.req)
			if tc.want == "" {
				require.ErrorIs(t, err, ErrNoKey)
				require.Empty(t, got, "key returned with an error")
				return
			}
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(got, tc.want), "key %q, want prefix %q", got, tc.want)
			require.Len(t, got, len("key:")+32, "key %q: want key: and 32 hex digits", got)
		})
	}
}

func TestAPIKeySecret(t *testing.T) {
	must := mustFunc(t)
	const raw = "sk_live_s3cr3t"
	r := req("", "X-API-Key", raw)
	plain, err := must(APIKeyHeader("X-API-Key"))(r)
	require.NoError(t, err)
	secret := []byte("pepper")
	fn := must(APIKeyHeader("X-API-Key", WithSecret(secret)))
	secret[0] = 'X' // WithSecret copied it
	a, err := fn(r)
	require.NoError(t, err)
	b, err := must(APIKeyHeader("X-API-Key", WithSecret([]byte("pepper"))))(r)
	require.NoError(t, err)
	c, err := must(APIKeyHeader("X-API-Key", WithSecret([]byte("salt"))))(r)
	require.NoError(t, err)

	require.Equal(t, "key:9162c411dbebce5f8f751b697bb8b395", a, "HMAC-SHA256(pepper, raw)")
	assert.Equal(t, a, b, "same secret, same key")
	assert.NotEqual(t, plain, a, "a secret changes the key")
	assert.NotEqual(t, c, a, "another secret, another key")

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
		assert.Equal(t, a, <-done, "key under concurrent use")
	}
}

func TestAPIKeyBadInput(t *testing.T) {
	cases := map[string]func() (Func, error){
		"empty header":       func() (Func, error) { return APIKeyHeader("") },
		"bad header":         func() (Func, error) { return APIKeyHeader("X API Key") },
		"header with colon":  func() (Func, error) { return APIKeyHeader("X-API-Key:") },
		"empty query":        func() (Func, error) { return APIKeyQuery("") },
		"nil secret":         func() (Func, error) { return APIKeyHeader("X-API-Key", WithSecret(nil)) },
		"empty secret":       func() (Func, error) { return APIKeyQuery("k", WithSecret([]byte{})) },
		"nil option":         func() (Func, error) { return APIKeyHeader("X-API-Key", Bearer(), nil) },
		"nil query option":   func() (Func, error) { return APIKeyQuery("k", nil) },
		"bearer on a query":  func() (Func, error) { return APIKeyQuery("k", Bearer()) },
		"bad secret, bearer": func() (Func, error) { return APIKeyHeader("Authorization", Bearer(), WithSecret(nil)) },
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			fn, err := build()
			requireInvalid(t, fn, err)
		})
	}
}
