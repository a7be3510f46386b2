package redistest

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ScoreState reads the score that rediswatch's scores.lua holds at key, as
// Redis holds it: '<dd', the score at its last signal and that signal's
// time in µs since the Unix epoch. It fails the test unless key holds
// such a state.
func ScoreState(tb testing.TB, c redis.UniversalClient, key string) (v float64, last time.Time) {
	tb.Helper()
	b, err := c.Get(context.Background(), key).Bytes()
	if err != nil {
		tb.Fatalf("the score at %q: %v", key, err)
	}
	if len(b) != 16 {
		tb.Fatalf("the score at %q: %d bytes, want 16", key, len(b))
	}
	at := math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
	return math.Float64frombits(binary.LittleEndian.Uint64(b[:8])), time.UnixMicro(int64(at))
}

// Score is ScoreState's score alone.
func Score(tb testing.TB, c redis.UniversalClient, key string) float64 {
	tb.Helper()
	v, _ := ScoreState(tb, c, key)
	return v
}
