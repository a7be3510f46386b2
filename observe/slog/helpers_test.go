package sloglimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/internal/rules/outcome"
	sloglimit "github.com/apigate/ratelimit/observe/slog"
)

// t0 is the virtual time at which every test starts.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is a virtual clock, safe for concurrent use: the Limiters' time
// (AllowAt) and the Loggers' sampling time at once.
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time          { return t0.Add(time.Duration(c.ns.Load())) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *clock) AdvanceNow(d time.Duration) time.Time {
	return t0.Add(time.Duration(c.ns.Add(int64(d))))
}

// sink is a JSON slog handler over a buffer, at every level unless level
// says.
type sink struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	level slog.LevelVar
}

func newSink() *sink {
	s := new(sink)
	s.level.Set(slog.LevelDebug)
	return s
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *sink) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: &s.level}))
}

func (s *sink) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// records decodes the lines written so far, and forgets them.
func (s *sink) records(t testing.TB) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	dec := json.NewDecoder(&s.buf)
	dec.UseNumber()
	for dec.More() {
		var m map[string]any
		require.NoError(t, dec.Decode(&m))
		out = append(out, m)
	}
	s.buf.Reset()
	return out
}

// newLogger returns a Logger writing to s, sampling by c.
func newLogger(t testing.TB, s *sink, c *clock, opts ...sloglimit.Option) *sloglimit.Logger {
	t.Helper()
	lg, err := sloglimit.New(s.logger(), opts...)
	require.NoError(t, err)
	lg.SetClock(c.Now)
	return lg
}

// newMemStore returns a memstore closed when t ends.
func newMemStore(t testing.TB) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// hourly admits one request per hour: every other request is denied.
var hourly = core.Policy{Name: "hourly", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}

func newLimiter(t testing.TB, store core.Store, p core.Policy, opts ...core.Option) *core.Limiter {
	t.Helper()
	l, err := core.NewLimiter(store, []core.Policy{p}, opts...)
	require.NoError(t, err)
	return l
}

// num returns the integer field name of record r, 0 if absent.
func num(t testing.TB, r map[string]any, name string) int64 {
	t.Helper()
	v, ok := r[name]
	if !ok {
		return 0
	}
	n, err := v.(json.Number).Int64()
	require.NoError(t, err, "%s = %v", name, v)
	return n
}

// errDown is the failure of a store that is down.
var errDown = errors.New("connection refused")

// flaky is a memstore that fails while down is set, with an error that
// names the key, as a careless store might.
type flaky struct {
	*memstore.Store
	down atomic.Bool
}

func (f *flaky) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	if f.down.Load() {
		return time.Time{}, fmt.Errorf("take %s: %w", reqs[0].Key, errDown)
	}
	return f.Store.Take(ctx, now, reqs, out)
}

var json0, json1 = jsonNum(0), jsonNum(1)

func jsonNum(n int64) json.Number { return json.Number(fmt.Sprint(n)) }

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }

// outcomeNames returns the name of every outcome, all that WithOutcomes
// takes.
func outcomeNames() []string {
	var names []string
	for _, o := range outcome.All() {
		names = append(names, o.String())
	}
	return names
}
