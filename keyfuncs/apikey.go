package keyfuncs

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/textproto"
	"strings"
	"sync"

	"github.com/apigate/ratelimit/core"
)

// MaxAPIKeyLen is the longest API key, in bytes, that APIKeyHeader and
// APIKeyQuery accept; a longer one is treated as no key, so that a client
// cannot make the server hash megabytes per request.
const MaxAPIKeyLen = 4096

// APIKeyOption configures [APIKeyHeader] and [APIKeyQuery]. A bad value
// makes the constructor return an error.
type APIKeyOption func(*apiKeyConfig) error

type apiKeyConfig struct {
	bearer bool
	secret []byte
}

// Bearer makes [APIKeyHeader] read an "Authorization: Bearer <token>"
// style header: the scheme, matched case-insensitively, is stripped and
// a header with another scheme holds no key. [APIKeyQuery] rejects it.
func Bearer() APIKeyOption {
	return func(c *apiKeyConfig) error {
		c.bearer = true
		return nil
	}
}

// WithSecret keys the hash of the API key with secret (HMAC-SHA256), so
// that a key seen in the rate-limit store cannot be checked against
// guessed API keys without the secret. The secret is copied; an empty
// one is an error.
func WithSecret(secret []byte) APIKeyOption {
	return func(c *apiKeyConfig) error {
		if len(secret) == 0 {
			return errors.New("WithSecret: empty secret")
		}
		c.secret = append([]byte(nil), secret...)
		return nil
	}
}

// APIKeyHeader returns a key function keying requests on the API key in
// the named header ("X-API-Key", or "Authorization" with [Bearer]).
//
// The raw key never appears in the result: the key is "key:" followed by
// the first 32 hex digits (128 bits) of its SHA-256, or of its
// HMAC-SHA256 with [WithSecret]. A missing, empty or over-long
// ([MaxAPIKeyLen]) value gives an error wrapping [ErrNoKey]. The function
// does not check that the key is valid: that is for your authentication,
// which should run first if invalid keys must not be limited as clients
// of their own. A name that is not a valid header name, or a bad option,
// is an error.
func APIKeyHeader(name string, opts ...APIKeyOption) (Func, error) {
	if !validToken(name) {
		return nil, fmt.Errorf("%w: keyfuncs.APIKeyHeader: invalid header name %q", core.ErrInvalidOption, name)
	}
	c, err := newAPIKeyConfig("APIKeyHeader", opts)
	if err != nil {
		return nil, err
	}
	name = textproto.CanonicalMIMEHeaderKey(name)
	h := newKeyHasher(c.secret, name)
	bearer := c.bearer
	return func(r Request) (string, error) {
		raw := trimOWS(r.Header(name))
		if bearer {
			raw = cutBearer(raw)
		}
		return h.key(raw)
	}, nil
}

// APIKeyQuery returns a key function keying requests on the API key in
// the named URL query parameter, hashed as by [APIKeyHeader]. An empty
// name, a bad option, or [Bearer] is an error.
func APIKeyQuery(name string, opts ...APIKeyOption) (Func, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: keyfuncs.APIKeyQuery: empty parameter name", core.ErrInvalidOption)
	}
	c, err := newAPIKeyConfig("APIKeyQuery", opts)
	if err != nil {
		return nil, err
	}
	if c.bearer {
		return nil, fmt.Errorf("%w: keyfuncs.APIKeyQuery: Bearer applies to headers only", core.ErrInvalidOption)
	}
	h := newKeyHasher(c.secret, name)
	return func(r Request) (string, error) {
		return h.key(trimOWS(r.Query(name)))
	}, nil
}

// newAPIKeyConfig applies opts in order and returns the first error,
// wrapping core.ErrInvalidOption and naming the constructor fn.
func newAPIKeyConfig(fn string, opts []APIKeyOption) (*apiKeyConfig, error) {
	c := new(apiKeyConfig)
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: keyfuncs.%s: option %d is nil", core.ErrInvalidOption, fn, i)
		}
		if err := opt(c); err != nil {
			return nil, fmt.Errorf("%w: keyfuncs.%s: %w", core.ErrInvalidOption, fn, err)
		}
	}
	return c, nil
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

func newKeyHasher(secret []byte, source string) *keyHasher {
	newHash := sha256.New
	if len(secret) > 0 {
		newHash = func() hash.Hash { return hmac.New(sha256.New, secret) }
	}
	return &keyHasher{
		states:     &sync.Pool{New: func() any { return &hashState{h: newHash()} }},
		errMissing: fmt.Errorf("%w: no API key in %q", ErrNoKey, source),
		errTooLong: fmt.Errorf("%w: API key in %q longer than %d bytes", ErrNoKey, source, MaxAPIKeyLen),
	}
}

func (k *keyHasher) key(raw string) (string, error) {
	if raw == "" {
		return "", k.errMissing
	}
	if len(raw) > MaxAPIKeyLen {
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
