package memstore_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// liveHeap returns the bytes of live heap after a collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// floodKey is the i-th key of a client rotating IPv6 /56 prefixes.
func floodKey(i int) string {
	return fmt.Sprintf("2001:db8:%x:%x00::/56", i>>8, i&0xff)
}

// TestRotatingKeysFloodStaysBounded floods a Store with twice its cap of
// new keys, one request each, as a client rotating IPv6 prefixes does:
// the key count never passes the cap, the live heap stops growing once the
// cap is reached, and a client at its limit all along (a lockout) stays
// limited, under every algorithm.
func TestRotatingKeysFloodStaysBounded(t *testing.T) {
	const maxKeys = 20_000
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(alg), func(t *testing.T) {
			s := newStore(t, memstore.WithMaxKeys(maxKeys))
			p := core.Policy{Name: "login", Algorithm: alg, Limit: 5, Window: time.Hour}
			before := liveHeap()
			// The victim uses its quota, then keeps trying.
			victimAdmitted := 0
			victim := func(i int) {
				if take(t, s, "victim", p, 1, t0.Add(time.Duration(i)*time.Microsecond)).Allowed {
					victimAdmitted++
				}
			}
			for i := range 5 {
				victim(i)
			}
			require.Equal(t, 5, victimAdmitted)

			var atCap int64
			for i := range 2 * maxKeys {
				now := t0.Add(time.Millisecond + time.Duration(i)*time.Microsecond)
				require.True(t, take(t, s, floodKey(i), p, 1, now).Allowed, "flood key %d", i)
				if i%100 == 0 {
					victim(1000 + i)
				}
				if i%1000 == 999 {
					require.LessOrEqual(t, s.Len(), maxKeys, "after %d flood keys", i+1)
				}
				if i == maxKeys-1 {
					atCap = liveHeap()
				}
			}
			after := liveHeap()
			assert.Equal(t, 5, victimAdmitted, "the victim's lockout was forgotten: %d admitted within the window", victimAdmitted)
			assert.LessOrEqual(t, s.Len(), maxKeys)
			assert.GreaterOrEqual(t, s.Len(), maxKeys*3/4, "the cap is badly underused")

			// The heap holds the store's keys, at a documented price each,
			// and a second cap's worth of keys adds nothing to it.
			perKey := float64(atCap-before) / maxKeys
			t.Logf("%.0f bytes per key at the cap; %+.1f%% after a second cap's worth of keys", perKey, 100*float64(after-atCap)/float64(atCap-before))
			assert.Less(t, perKey, 300.0, "bytes per key")
			assert.Less(t, after-atCap, (atCap-before)/10+512<<10, "the heap grew past the cap: %d bytes at the cap, %d after", atCap-before, after-before)
			runtime.KeepAlive(s)
		})
	}
}

// TestFloodOfEqualStatesKeepsTheOldOnes floods a full Store with new keys
// that each use their whole quota, as much as the victim's lockout holds
// back: the flood's newer states are evicted before the victim's.
func TestFloodOfEqualStatesKeepsTheOldOnes(t *testing.T) {
	const maxKeys = 2_000
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		t.Run(string(alg), func(t *testing.T) {
			s := newStore(t, memstore.WithMaxKeys(maxKeys))
			p := core.Policy{Name: "login", Algorithm: alg, Limit: 5, Window: time.Hour}
			require.True(t, take(t, s, "victim", p, 5, t0).Allowed)
			for i := range 5 * maxKeys {
				now := t0.Add(time.Millisecond + time.Duration(i)*time.Microsecond)
				require.True(t, take(t, s, floodKey(i), p, 5, now).Allowed)
			}
			d := take(t, s, "victim", p, 1, t0.Add(time.Second))
			assert.False(t, d.Allowed, "the victim's lockout was evicted: %+v", d)
			assert.LessOrEqual(t, s.Len(), maxKeys)
		})
	}
}

// TestKeptKeysAreCopies decides with a client key, then a policy name,
// that point into a buffer the caller rewrites after the call, as Fiber's
// zero-copy values are rewritten by the next request: the Store must have
// kept copies, so the client's state is still found under its own key and
// name, and the rewritten bytes name a new client (or policy).
func TestKeptKeysAreCopies(t *testing.T) {
	for _, alg := range limits.Algorithms[core.Algorithm]() {
		for _, part := range []string{"key", "name"} {
			t.Run(string(alg)+"/"+part, func(t *testing.T) {
				s := newStore(t)
				buf := []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
				zeroCopy := unsafe.String(&buf[0], len(buf))
				orig := string(buf)
				key, p := "client", core.Policy{Name: "policy", Algorithm: alg, Limit: 2, Window: time.Hour}
				with := func(s string) (string, core.Policy) {
					if part == "key" {
						return s, p
					}
					q := p
					q.Name = s
					return key, q
				}

				k, q := with(zeroCopy)
				require.True(t, take(t, s, k, q, 2, t0).Allowed)
				for i := range buf { // the caller reuses its buffer
					buf[i] = 'b'
				}
				k, q = with(orig)
				d := take(t, s, k, q, 1, t0)
				assert.False(t, d.Allowed, "the first client's state was lost: %+v", d)
				k, q = with(string(buf))
				d = take(t, s, k, q, 1, t0)
				assert.True(t, d.Allowed, "a new %s found another's state: %+v", part, d)
				assert.Equal(t, int64(1), d.Remaining)
			})
		}
	}
}
