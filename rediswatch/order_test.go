package rediswatch

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// TestApplyOwnOrder plays the two races of a server's own change against
// the changes it applies from the log, which concurrent calls hit now and
// then: its own change reaching applyOwn after the poller applied it and
// a later one of the same target, and two of its own changes of one
// target applied in the reverse order. Neither may leave the older state.
func TestApplyOwnOrder(t *testing.T) {
	srv := redistest.Start(t)
	p := WithKey(fmt.Sprintf("test:order:%d", time.Now().UnixNano()))
	ctx := context.Background()
	slow := WithPollInterval(time.Minute)
	one, err := NewBans(context.Background(), srv.Client(), p, slow)
	require.NoError(t, err)
	t.Cleanup(func() { _ = one.Close() })
	two, err := NewBans(context.Background(), srv.Client(), p, slow)
	require.NoError(t, err)
	t.Cleanup(func() { _ = two.Close() })
	reason := func(b *Bans) string {
		e, ok := b.Match(netip.Addr{}, "user:x", time.Now())
		if !ok {
			return "-"
		}
		return e.Reason
	}

	// Server one bans user:x ("a"), as Redis numbers it...
	one.mu.Lock()
	before := one.loaded
	one.mu.Unlock()
	res, err := banScript.Run(ctx, one.client, []string{one.index, one.ver, one.log, one.marker, one.rjournal, one.banKey + "k:user:x"},
		one.cfg.max, logLen, "k:user:x", "ever", 0, "a").StringSlice()
	require.NoError(t, err)
	seqA := parseSeq(res[4])
	// ... server two bans it again ("b"), and server one's poller applies
	// both before the Ban of "a" gets to apply its own.
	_, err = two.Ban(ctx, access.Entry{Key: "user:x", Reason: "b"}, 0)
	require.NoError(t, err)
	require.NoError(t, one.Sync(ctx))
	require.Equal(t, "b", reason(one))
	one.applyOwn(before, res[2], res[4], []ownChange{{id: "k:user:x", seq: seqA, entry: access.Entry{Key: "user:x", Reason: "a"}}})
	assert.Equal(t, "b", reason(one), "a change already applied, then overtaken, came back")

	// The same on a view that a load made, which records no change in
	// the journal when it is the first: the view's version is what tells.
	three, err := NewBans(context.Background(), srv.Client(), p, slow)
	require.NoError(t, err)
	t.Cleanup(func() { _ = three.Close() })
	require.Equal(t, "b", reason(three))
	three.applyOwn(before, res[2], res[4], []ownChange{{id: "k:user:x", seq: seqA, entry: access.Entry{Key: "user:x", Reason: "a"}}})
	assert.Equal(t, "b", reason(three), "a change the loaded view held, then overtaken, came back")

	// Two of server one's own changes, applied in the reverse order, while
	// a change of server two's is between the view and them.
	_, err = two.Ban(ctx, access.Entry{Key: "user:y"}, 0)
	require.NoError(t, err)
	_, err = one.Ban(ctx, access.Entry{Key: "user:x", Reason: "later"}, 0)
	require.NoError(t, err)
	one.mu.Lock()
	seqLater, _ := one.journal.seen("k:user:x")
	loaded := one.loaded
	one.mu.Unlock()
	one.applyOwn("not the view's version", "0-1", "1", []ownChange{{id: "k:user:x", seq: seqLater - 1, entry: access.Entry{Key: "user:x", Reason: "earlier"}}})
	assert.Equal(t, "later", reason(one), "an earlier change of this server's own undid a later one")
	one.mu.Lock()
	assert.Equal(t, loaded, one.loaded, "an out-of-order change does not move the view's version")
	one.mu.Unlock()
}
