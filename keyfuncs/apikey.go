package keyfuncs

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"net/textproto"
	"strings"
	"sync"

	"github.com/apigate/ratelimit/core"
)

// maxAPIKeyLen is the longest API key, in bytes, that the API key
// functions accept; a longer one is treated as no key, so that a client
// cannot make the server hash megabytes per request.
const maxAPIKeyLen = 4096

// APIKeyHeader returns a key function keying requests on the API key in
// the named header ("X-API-Key"), or on the bearer token of
// Authorization: with name "Authorization", a value "Bearer <token>" (the
// scheme matched case-insensitively) is keyed on the token, and one of
// another scheme holds no key.
//
// The raw key never appears in the result: the key is "key:" followed by
// the first 32 hex digits (128 bits) of its HMAC-SHA256 keyed with
// secret, so that a key seen in the rate-limit store cannot be checked
// against guessed API keys without the secret; or, with a nil secret, of
// its plain SHA-256. The secret is copied. A missing, empty or over-long
// (4096 bytes) value gives an error wrapping [ErrNoKey]. The function
// does not check that the key is valid: that is for your authentication,
// which should run first if invalid keys must not be limited as clients
// of their own. A name that is not a valid header name, or a secret that
// is empty but not nil (an unset variable read as []byte("")), is an
// error.
func APIKeyHeader(name string, secret []byte) (Func, error) {
	if !validToken(name) {
		return nil, fmt.Errorf("%w: keyfuncs.APIKeyHeader: invalid header name %q", core.ErrInvalidOption, name)
	}
	if err := checkSecret("APIKeyHeader", secret); err != nil {
		return nil, err
	}
	name = textproto.CanonicalMIMEHeaderKey(name)
	h := newKeyHasher(secret, name)
	if name == "Authorization" {
		return func(r Request) (string, error) { return h.key(cutBearer(trimOWS(r.Header(name)))) }, nil
	}
	return func(r Request) (string, error) { return h.key(trimOWS(r.Header(name))) }, nil
}

// checkSecret rejects a secret that is empty but not nil: nil asks for no
// secret, an empty one is most likely a secret that was never set.
func checkSecret(fn string, secret []byte) error {
	if secret != nil && len(secret) == 0 {
		return fmt.Errorf("%w: keyfuncs.%s: empty secret (nil for none)", core.ErrInvalidOption, fn)
	}
	return nil
}

// cutBearer returns the token of a Bearer credential, "" if v is not one.
func cutBearer(v string) string {
	const scheme = "Bearer "
	if len(v) < len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return ""
	}
	return trimOWS(v[len(scheme):])
}

// keyHasher turns a raw API key into its key, "key:" and 32 hex digits.
// Its errors are made once, so that a request without a key (the common
// case in a FirstOf chain) costs no allocation.
type keyHasher struct {
	states     *sync.Pool // of *hashState
	errMissing error
	errTooLong error
}

// hashState is a reusable hash and the buffers that feed and read it
// without allocating.
type hashState struct {
	h   hash.Hash
	buf [256]byte
	sum [sha256.Size]byte
}

// newKeyHasher returns the hasher of keys from source, keyed with a copy
// of secret when it is not empty.
func newKeyHasher(secret []byte, source string) *keyHasher {
	newHash := sha256.New
	if len(secret) > 0 {
		secret = append([]byte(nil), secret...)
		newHash = func() hash.Hash { return hmac.New(sha256.New, secret) }
	}
	return &keyHasher{
		states:     &sync.Pool{New: func() any { return &hashState{h: newHash()} }},
		errMissing: fmt.Errorf("%w: no API key in %q", ErrNoKey, source),
		errTooLong: fmt.Errorf("%w: API key in %q longer than %d bytes", ErrNoKey, source, maxAPIKeyLen),
	}
}

func (k *keyHasher) key(raw string) (string, error) {
	if raw == "" {
		return "", k.errMissing
	}
	if len(raw) > maxAPIKeyLen {
		return "", k.errTooLong
	}
	st := k.states.Get().(*hashState)
	st.h.Reset()
	for s := raw; s != ""; {
		n := copy(st.buf[:], s)
		st.h.Write(st.buf[:n])
		s = s[n:]
	}
	var out [4 + 32]byte
	copy(out[:], "key:")
	hex.Encode(out[4:], st.h.Sum(st.sum[:0])[:16])
	k.states.Put(st)
	return string(out[:]), nil
}
