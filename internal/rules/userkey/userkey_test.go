package userkey

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

func TestLookup(t *testing.T) {
	l := New(`gin context key "user"`)
	long := strings.Repeat("u", MaxIDLen)
	cases := []struct {
		name    string
		v       any
		found   bool
		want    string // "" with noKey or errText: an error
		noKey   bool   // the error wraps ErrNoKey
		errText string // the error says this
	}{
		{"user", "u-42", true, "user:u-42", false, ""},
		{"at the cap", long, true, "user:" + long, false, ""},
		{"not found", nil, false, "", true, `no user in gin context key "user"`},
		{"found but nil", nil, true, "", true, "no user in"},
		{"not found, value ignored", "u-42", false, "", true, "no user in"},
		{"empty", "", true, "", true, "empty user ID in"},
		{"over the cap", long + "u", true, "", true, "longer than 512 bytes"},
		{"an int", 42, true, "user:42", false, ""},
		{"an int64", int64(-7), true, "user:-7", false, ""},
		{"a uint64", uint64(18446744073709551615), true, "user:18446744073709551615", false, ""},
		{"a Stringer", stringer("9f2c-uuid"), true, "user:9f2c-uuid", false, ""},
		{"an empty Stringer", stringer(""), true, "", true, "empty user ID in"},
		{"a float", 4.2, true, "", false, `keyfuncs: user in gin context key "user" is a float64, not a string, an integer or a fmt.Stringer`},
		{"a struct", struct{ ID int }{42}, true, "", false, "not a string, an integer or a fmt.Stringer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := l.Value(tc.v, tc.found)
			if tc.want != "" {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
				return
			}
			require.Error(t, err)
			assert.Empty(t, got, "key returned with an error")
			assert.ErrorContains(t, err, tc.errText)
			if tc.noKey {
				assert.ErrorIs(t, err, ErrNoKey)
				assert.NotErrorIs(t, err, ErrIDType)
			} else {
				assert.NotErrorIs(t, err, ErrNoKey, "a programming error must not look like a missing user")
				assert.ErrorIs(t, err, ErrIDType, "the type's error, told without reading its text")
			}
		})
	}
}

func TestLookupNoUserAllocatesNothing(t *testing.T) {
	l := New("context")
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = l.ID("", false)
		_, _ = l.ID("", true)
		_, _ = l.Value(nil, true)
	})
	assert.Zero(t, allocs)
}

func TestCheckKey(t *testing.T) {
	type ctxKey struct{}
	for _, key := range []any{ctxKey{}, "user", 0, new(int)} {
		assert.NoError(t, CheckKey("f", key), "key %#v", key)
	}
	for _, key := range []any{nil, "", []byte("user"), map[string]int{}, func() {}} {
		err := CheckKey("f", key)
		assert.ErrorIs(t, err, core.ErrInvalidOption, "key %#v", key)
		assert.NotErrorIs(t, err, ErrNoKey, "key %#v", key)
	}
}

// stringer is a user ID type with a String method, as a UUID is.
type stringer string

func (s stringer) String() string { return string(s) }
