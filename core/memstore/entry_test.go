package memstore

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEntrySize keeps an entry within its size class: a field added to
// state takes its room from the inline key, down to 8 bytes, and past that
// every key would cost another 16 bytes.
func TestEntrySize(t *testing.T) {
	require.LessOrEqual(t, unsafe.Sizeof(entry{}), uintptr(entrySize))
	require.GreaterOrEqual(t, inlineKey, len("ip:255.255.255.255"), "an IPv4 key fits inline")
}

// TestSetKey copies the key, into the entry when it fits: the caller may
// rewrite its bytes afterwards.
func TestSetKey(t *testing.T) {
	for _, n := range []int{1, inlineKey - 1, inlineKey, inlineKey + 1, 200} {
		buf := []byte(strings.Repeat("k", n))
		key := unsafe.String(&buf[0], len(buf))
		var e entry
		e.setKey(key)
		buf[0] = 'x' // the caller reuses its memory
		assert.Equal(t, strings.Repeat("k", n), e.key, "len %d", n)
		inline := unsafe.StringData(e.key) == &e.inline[0]
		assert.Equal(t, n <= inlineKey, inline, "len %d held inline", n)
	}
}
