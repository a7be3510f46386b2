package sloglimit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/netip"
	"strings"
)

// keyHashLen is how many hex digits of the digest "key_hash" shows: 64
// bits, enough to tell the clients of one log apart.
const keyHashLen = 16

// keyAttr returns the attribute that shows key under the Logger's
// KeyMode, and whether key is shown as it is; ok is false when no
// attribute is to be written (KeysHidden, or no key).
func (l *Logger) keyAttr(key string) (a slog.Attr, plain, ok bool) {
	if key == "" || l.keys == KeysHidden {
		return slog.Attr{}, false, false
	}
	if l.keys == KeysRaw || l.keys == KeysSafe && safeKey(key) {
		// Event.Key may share memory with a request buffer: a handler
		// that keeps the record must not see it change.
		return slog.String("key", strings.Clone(key)), true, true
	}
	return slog.String("key_hash", l.digest(key)), false, true
}

// digest returns the first keyHashLen hex digits of the SHA-256 of key,
// or of its HMAC-SHA256 under the Logger's key secret.
func (l *Logger) digest(key string) string {
	var sum []byte
	if l.keySecret != nil {
		m := hmac.New(sha256.New, l.keySecret)
		m.Write([]byte(key))
		sum = m.Sum(nil)
	} else {
		s := sha256.Sum256([]byte(key))
		sum = s[:]
	}
	return hex.EncodeToString(sum[:keyHashLen/2])
}

// safeKey reports whether key cannot hold a secret, and may be logged as
// it is: it is one of these, or several joined by "|" (keyfuncs.Compose):
//
//	ip:203.0.113.7            an IP address, as keyfuncs.ClientIP writes it
//	ip:2001:db8:1:100::/56    an IP prefix, likewise (masked)
//	key:<32 hex digits>       an API key hashed by keyfuncs.APIKeyHeader or Bearer
//	sha256:<64 hex digits>    a key the core replaced by its digest (over 128 bytes)
//
// Hex digits are lowercase, as both write them; an address or prefix
// must be in the canonical form netip writes, without a zone.
func safeKey(key string) bool {
	for {
		part, rest, more := strings.Cut(key, "|")
		if !safePart(part) {
			return false
		}
		if !more {
			return true
		}
		key = rest
	}
}

func safePart(p string) bool {
	switch {
	case strings.HasPrefix(p, "ip:"):
		return canonicalIP(p[len("ip:"):])
	case strings.HasPrefix(p, "key:"):
		return lowerHex(p[len("key:"):], 32)
	case strings.HasPrefix(p, "sha256:"):
		return lowerHex(p[len("sha256:"):], 64)
	}
	return false
}

// canonicalIP reports whether s is an IP address or a masked prefix,
// without a zone, written exactly as netip writes it.
func canonicalIP(s string) bool {
	var buf [64]byte
	if strings.IndexByte(s, '/') < 0 {
		a, err := netip.ParseAddr(s)
		return err == nil && a.Zone() == "" && string(a.AppendTo(buf[:0])) == s
	}
	p, err := netip.ParsePrefix(s)
	return err == nil && p == p.Masked() && string(p.AppendTo(buf[:0])) == s
}

// lowerHex reports whether s is n lowercase hex digits.
func lowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
