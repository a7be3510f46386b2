package core

import (
	"strings"
	"testing"
)

// plainKeyByBytes is plainKey's definition, a byte at a time.
func plainKeyByBytes(key string) bool {
	for i := 0; i < len(key); i++ {
		if b := key[i]; b < 0x21 || b > 0x7e || b == '{' || b == '}' {
			return false
		}
	}
	return true
}

// TestPlainKeyEveryByteEveryPlace: every byte value, at every place of
// keys of every length up to 40 (under, at and over a word, and the
// overlapping last word), around plain neighbours of each kind (the
// lowest and highest plain bytes, which a borrow or carry from a
// neighbour would tip), is judged as the byte loop judges it.
func TestPlainKeyEveryByteEveryPlace(t *testing.T) {
	for _, fill := range []byte{'a', 0x21, 0x7e, 0x7c, 0x7a} {
		for n := 1; n <= 40; n++ {
			base := []byte(strings.Repeat(string(fill), n))
			for i := range n {
				for b := range 256 {
					k := append([]byte(nil), base...)
					k[i] = byte(b)
					key := string(k)
					if got, want := plainKey(key), plainKeyByBytes(key); got != want {
						t.Fatalf("plainKey(%q) = %v, want %v", key, got, want)
					}
				}
			}
		}
	}
}

// FuzzPlainKey: plainKey agrees with the byte loop on any key.
func FuzzPlainKey(f *testing.F) {
	for _, s := range []string{"", "203.0.113.7", "user:{42}", "sha256:" + strings.Repeat("ab", 32), "a b", "\x7f\x80\xff", strings.Repeat("~", 17)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if got, want := plainKey(key), plainKeyByBytes(key); got != want {
			t.Fatalf("plainKey(%q) = %v, want %v", key, got, want)
		}
	})
}
