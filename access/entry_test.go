package access_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
)

// TestEntryError: an Entry is an error whose text is String's, so that
// every place printing an Entry (logs, a List's or Bans' entries, cmd)
// prints what it did before Entry had an Error method, and errors.As finds
// the entry in an error that wraps it.
func TestEntryError(t *testing.T) {
	at := time.Date(2026, 12, 4, 22, 0, 0, 0, time.FixedZone("CET", 3600))
	entries := []access.Entry{
		{},
		{Prefix: netip.MustParsePrefix("203.0.113.0/24"), Reason: "scanner"},
		{Prefix: netip.MustParsePrefix("2001:db8::/32"), Expires: at},
		{Key: "user:42", Reason: "abuse, see ticket 7"},
		{Key: "user:7", Expires: at, Reason: "cool-down"},
	}
	want := []string{"-", "203.0.113.0/24", "2001:db8::/32 expires=2026-12-04T21:00:00Z", "user:42", "user:7 expires=2026-12-04T21:00:00Z"}
	for i, e := range entries {
		s := want[i]
		assert.Equal(t, s, e.String())
		assert.Equal(t, s, e.Error(), "Error is String")
		for _, verb := range []string{"%v", "%s", "%+v", "%q"} {
			assert.Equal(t, fmt.Sprintf(verb, s), fmt.Sprintf(verb, e), "%s of %s", verb, s)
		}
		assert.Equal(t, s+"\n", fmt.Sprintln(e))
		assert.NotContains(t, fmt.Sprint(e), "ticket", "never the reason")

		var asEntry, asString strings.Builder
		noTime := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}
		slog.New(slog.NewTextHandler(&asEntry, noTime)).Info("m", "entry", e)
		slog.New(slog.NewTextHandler(&asString, noTime)).Info("m", "entry", s)
		assert.Equal(t, asString.String(), asEntry.String(), "slog's text handler")
	}
	assert.Equal(t, "["+strings.Join(want, " ")+"]", fmt.Sprint(entries), "a list of entries, as List and Bans give them")

	var got access.Entry
	err := fmt.Errorf("refused: %w", entries[3])
	require.True(t, errors.As(err, &got), "errors.As finds a wrapped entry")
	assert.Equal(t, entries[3], got)
	assert.Equal(t, "scanner", func() string {
		var e access.Entry
		if errors.As(error(entries[1]), &e) {
			return e.Reason
		}
		return ""
	}())
	assert.False(t, errors.As(errors.New("other"), &got), "no entry in another error")
}
