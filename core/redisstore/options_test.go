package redisstore

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
)

// TestNewRejects: a nil client, a nil option and every option value out
// of its documented range fail New with core.ErrInvalidOption, naming what
// was wrong, and return no Store.
func TestNewRejects(t *testing.T) {
	// Never dialled: New does no I/O when it fails.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = client.Close() })
	tests := []struct {
		name   string
		client redis.UniversalClient
		opts   []Option
		want   string // in the error
	}{
		{"nil client", nil, nil, "nil client"},
		{"nil *redis.Client", (*redis.Client)(nil), nil, "nil *redis.Client"},
		{"nil *redis.ClusterClient", (*redis.ClusterClient)(nil), nil, "nil *redis.ClusterClient"},
		{"nil option", client, []Option{nil}, "option 0 is nil"},
		{"nil option after a good one", client, []Option{WithPrefix("a:"), nil}, "option 1 is nil"},
		{"nil logger", client, []Option{WithLogger(nil)}, "WithLogger"},
		{"prefix with an opening brace", client, []Option{WithPrefix("app{1}:")}, "WithPrefix"},
		{"prefix with a closing brace", client, []Option{WithPrefix("app}:")}, "WithPrefix"},
		{"prefix with a newline", client, []Option{WithPrefix("app\n")}, "WithPrefix"},
		{"prefix with a NUL", client, []Option{WithPrefix("app\x00")}, "WithPrefix"},
		{"prefix with a DEL", client, []Option{WithPrefix("app\x7f")}, "WithPrefix"},
		{"prefix with a tab", client, []Option{WithPrefix("\tapp")}, "WithPrefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.client, tt.opts...)
			require.ErrorIs(t, err, core.ErrInvalidOption)
			assert.ErrorContains(t, err, tt.want)
			assert.Nil(t, s, "a Store besides the error")
		})
	}
}

// TestOptions: the options set what they say, the defaults hold without
// them, and the last of two same options wins.
func TestOptions(t *testing.T) {
	client := redistest.Start(t).Client()
	logger := slog.New(slog.DiscardHandler)
	tests := []struct {
		name   string
		opts   []Option
		prefix string
		logger *slog.Logger
	}{
		{"defaults", nil, defaultPrefix, nil},
		{"prefix", []Option{WithPrefix("app:rl:")}, "app:rl:", nil},
		{"empty prefix", []Option{WithPrefix("")}, "", nil},
		{"prefix beyond ASCII", []Option{WithPrefix("débit:")}, "débit:", nil},
		{"last prefix wins", []Option{WithPrefix("a:"), WithPrefix("b:")}, "b:", nil},
		{"logger", []Option{WithLogger(logger)}, defaultPrefix, logger},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustNew(t, client, tt.opts...)
			waitChecked(t, s, 10*time.Second)
			assert.Equal(t, tt.prefix, s.prefix, "prefix")
			assert.Same(t, tt.logger, s.logger, "logger (nil: slog.Default() at the time of logging)")
			assert.Equal(t, explicitNowMinTTL, s.explicitMinTTL, "explicitMinTTL")
			assert.Equal(t, configCheckTimeout, s.checkTimeout, "checkTimeout")
			p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 1, Window: time.Second}
			assert.Equal(t, tt.prefix+"{k}:p:fw2", s.stateKey("k", p), "key")
		})
	}
}

// TestEmptyPrefix decides over a real Redis with no prefix: the key is the
// hash tag itself.
func TestEmptyPrefix(t *testing.T) {
	s, _, c := newStore(t, WithPrefix(""))
	ctx := context.Background()
	key := testPrefix(t) // unique on a shared server
	p := core.Policy{Name: "p", Algorithm: core.FixedWindow, Limit: 1, Window: time.Minute}
	d, _, err := take1(s, ctx, time.Time{}, core.Request{Key: key, Policy: p, Cost: 1})
	require.NoError(t, err)
	require.True(t, d.Allowed, "Allowed")
	assert.EqualValues(t, 1, c.Exists(ctx, "{"+key+"}:p:fw2").Val(), "the key without a prefix")
}
