package keyfuncs

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAPIKey(t *testing.T) {
	must := mustFunc(t)
	const raw = "sk_live_s3cr3t"
	plain, err := must(APIKeyHeader("X-API-Key", nil))(req("", "x-api-key", raw))
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
		{"same key same bucket", must(APIKeyHeader("X-API-Key", nil)), req("", "X-API-Key", " "+raw+" "), plain},
		{"bearer", must(APIKeyHeader("Authorization", nil)), req("", "Authorization", "Bearer "+raw), plain},
		{"bearer case", must(APIKeyHeader("Authorization", nil)), req("", "Authorization", "bEaReR  "+raw), plain},
		{"bearer: other scheme", must(APIKeyHeader("Authorization", nil)), req("", "Authorization", "Basic "+raw), ""},
		{"bearer: no token", must(APIKeyHeader("Authorization", nil)), req("", "Authorization", "Bearer "), ""},
		{"bearer: scheme only", must(APIKeyHeader("Authorization", nil)), req("", "Authorization", "Bearer"), ""},
		{"bearer only in Authorization", must(APIKeyHeader("X-API-Key", nil)), req("", "X-API-Key", "Bearer "+raw), "key:" + hexSHA("Bearer "+raw)},
		{"missing", must(APIKeyHeader("X-API-Key", nil)), req(""), ""},
		{"empty", must(APIKeyHeader("X-API-Key", nil)), req("", "X-API-Key", "  "), ""},
		{"at the cap", must(APIKeyHeader("X-API-Key", nil)), req("", "X-API-Key", strings.Repeat("a", maxAPIKeyLen)), "key:"},
		{"over the cap", must(APIKeyHeader("X-API-Key", nil)), req("", "X-API-Key", strings.Repeat("a", maxAPIKeyLen+1)), ""},
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
	plain, err := must(APIKeyHeader("X-API-Key", nil))(r)
	require.NoError(t, err)
	secret := []byte("pepper")
	fn := must(APIKeyHeader("X-API-Key", secret))
	secret[0] = 'X' // APIKeyHeader copied it
	a, err := fn(r)
	require.NoError(t, err)
	b, err := must(APIKeyHeader("X-API-Key", []byte("pepper")))(r)
	require.NoError(t, err)
	c, err := must(APIKeyHeader("X-API-Key", []byte("salt")))(r)
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
		"empty header":         func() (Func, error) { return APIKeyHeader("", nil) },
		"bad header":           func() (Func, error) { return APIKeyHeader("X API Key", nil) },
		"header with colon":    func() (Func, error) { return APIKeyHeader("X-API-Key:", nil) },
		"empty secret":         func() (Func, error) { return APIKeyHeader("X-API-Key", []byte{}) },
		"unset secret":         func() (Func, error) { return APIKeyHeader("X-API-Key", []byte(os.Getenv("KEYFUNCS_TEST_UNSET"))) },
		"bearer: empty header": func() (Func, error) { return APIKeyHeader("", nil) },
		"bearer: bad header":   func() (Func, error) { return APIKeyHeader("Author ization", nil) },
		"bearer: empty secret": func() (Func, error) { return APIKeyHeader("Authorization", []byte("")) },
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			fn, err := build()
			requireInvalid(t, fn, err)
		})
	}
}

// hexSHA is the first 32 hex digits of s's SHA-256, as an unkeyed API key
// is hashed.
func hexSHA(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}
