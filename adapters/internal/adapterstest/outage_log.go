package adapterstest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
	"github.com/apigate/ratelimit/keyfuncs"
)

// outageLogEvery is the least time between two Warn lines of one Flow's
// outage, as httplimit.LogErrors documents it.
const outageLogEvery = 10 * time.Second

// logRecord is one record a logRecorder kept.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// logRecorder is a slog.Handler keeping every record, at every level.
type logRecorder struct {
	mu   sync.Mutex
	recs []logRecord
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, rec)
	return nil
}

// all returns the records kept.
func (h *logRecorder) all() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]logRecord(nil), h.recs...)
}

// with returns the records of recs at level with message msg.
func with(recs []logRecord, level slog.Level, msg string) []logRecord {
	var out []logRecord
	for _, r := range recs {
		if r.level == level && r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

// noneCanceled fails the test for each record that calls a request
// canceled.
func noneCanceled(t *testing.T, recs []logRecord) {
	t.Helper()
	for _, r := range recs {
		assert.NotContains(t, r.msg, "canceled", "a store failure logged as a disconnect: %+v", r)
	}
}

// armedLog returns the ErrorHandler option of a Flow that logs through
// LogErrors into a new logRecorder once armed is set, and drops what the
// Flow hears before (a warm-up on a busy machine may meet a slow store).
// heard counts the store failures passed on.
func armedLog(armed *atomic.Bool, heard *atomic.Int64) (httplimit.Option, *logRecorder) {
	rec := new(logRecorder)
	h := httplimit.LogErrors(slog.New(rec))
	return httplimit.WithErrorHandler(func(r keyfuncs.Request, err error) {
		if armed.Load() {
			if heard != nil && errors.Is(err, limits.ErrStore) {
				heard.Add(1)
			}
			h(r, err)
		}
	}), rec
}

// RunOutageLog freezes a Redis of its own under a Flow (fail open, the
// store's timeout short) that logs through httplimit.LogErrors, and sends
// many requests over real sockets: the Flow's ErrorHandler hears every
// store failure, yet the log gets the first one at once, at Warn, naming
// the store's error, and at most one line each 10 seconds after it, none
// calling the request canceled; once Redis is thawed, one Info line says
// the store decides again. Meanwhile a client that leaves while its
// request waits on the frozen store is still canceled (499, at Debug),
// and a key function that times out while its client waits is not (500,
// at Warn). Last, Redis is killed: a Flow that had not failed yet logs
// its first failure at once, at Warn, naming the store's error.
func RunOutageLog(t *testing.T, h SocketHarness) {
	srv := redistest.Start(t)
	if srv.External() {
		t.Skip("needs a redis-server of its own to freeze")
	}
	client := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = client.Close() })
	newStore := func(timeout time.Duration, prefix string) core.Store {
		s, err := redisstore.New(client, redisstore.WithTimeout(timeout), redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		return s
	}
	policy := core.Policy{Name: "outage-log", Algorithm: core.TokenBucket, Limit: 1_000_000, Window: time.Second}

	var armed atomic.Bool
	var heard atomic.Int64
	outageOpt, outageLog := armedLog(&armed, &heard)
	outage := NewFlow(t, newStore(100*time.Millisecond, "outage-log:"), []httplimit.Layer{{Policy: policy}}, nil, outageOpt)
	leaveOpt, leaveLog := armedLog(&armed, nil)
	// The client leaves long before this store gives up on Redis.
	leave := NewFlow(t, newStore(testwait.D(10*time.Second), "outage-leave:"), []httplimit.Layer{{Policy: policy}}, nil, leaveOpt)
	keyOpt, keyLog := armedLog(&armed, nil)
	lookup := func(keyfuncs.Request) (string, error) {
		return "", fmt.Errorf("api key lookup: %w", context.DeadlineExceeded)
	}
	keyTimeout := NewFlow(t, NewStore(t), []httplimit.Layer{{Policy: policy, Key: lookup}}, nil, keyOpt)
	deadOpt, deadLog := armedLog(&armed, nil)
	dead := NewFlow(t, newStore(100*time.Millisecond, "outage-dead:"), []httplimit.Layer{{Policy: policy}}, nil, deadOpt)
	spec := &Spec{Routes: []Route{
		{Method: "GET", Path: "/", Limits: []Mount{{Flow: outage}}},
		{Method: "GET", Path: "/leave", Limits: []Mount{{Flow: leave}}},
		{Method: "GET", Path: "/lookup", Limits: []Mount{{Flow: keyTimeout}}},
		{Method: "GET", Path: "/dead", Limits: []Mount{{Flow: dead}}},
	}}
	addr := h.Serve(t, spec)
	decided := func() bool { // by the store: it wrote the client's quota
		res := Send(t, addr, RawRequest{})
		return res.Status == http.StatusOK && res.Header.Get("X-RateLimit-Remaining") != ""
	}
	testwait.For(t, 10*time.Second, 10*time.Millisecond, decided, "healthy: the store decides")
	armed.Store(true)

	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	start := time.Now()
	const clients, each = 4, 50
	var wg sync.WaitGroup
	for range clients {
		c := Dial(t, addr)
		wg.Go(func() {
			for i := range each {
				res, err := c.Try(RawRequest{})
				if !assert.NoError(t, err, "request %d", i) {
					return
				}
				assert.Equal(t, http.StatusOK, res.Status, "fail open")
				assert.Empty(t, res.Header.Get("X-RateLimit-Remaining"), "the store told nothing")
			}
		})
	}
	wg.Wait()
	frozenFor := time.Since(start)

	t.Run("client leaves", func(t *testing.T) {
		if !h.CancelsOnDisconnect() {
			t.Skip("the server does not end a request's context when its client leaves")
		}
		res := Dial(t, addr).Do(t, RawRequest{Path: "/leave", HalfClose: true})
		assert.Equal(t, statusClientClosed, res.Status)
		assert.Equal(t, canceledBody, res.Body)
		recs := leaveLog.all()
		require.Len(t, recs, 1, "%+v", recs)
		assert.Equal(t, slog.LevelDebug, recs[0].level)
		assert.Equal(t, "ratelimit: request canceled", recs[0].msg)
		assert.Contains(t, recs[0].attrs["error"], context.Canceled.Error())
	})
	t.Run("key function times out", func(t *testing.T) {
		res := Send(t, addr, RawRequest{Path: "/lookup"})
		assert.Equal(t, http.StatusInternalServerError, res.Status, "the client waits: no 499")
		recs := keyLog.all()
		require.Len(t, recs, 1, "%+v", recs)
		assert.Equal(t, slog.LevelWarn, recs[0].level)
		assert.Equal(t, "ratelimit: request not decided", recs[0].msg)
	})

	srv.Thaw()
	thawed = true
	testwait.For(t, 10*time.Second, 10*time.Millisecond, decided, "thawed: the store decides again")
	for range 5 {
		require.True(t, decided(), "the store decides")
	}
	outageFor := time.Since(start)

	recs := outageLog.all()
	t.Logf("%d store failures heard in %v (frozen %v), %d records: %+v", heard.Load(), outageFor, frozenFor, len(recs), recs)
	assert.GreaterOrEqual(t, heard.Load(), int64(clients*each), "the ErrorHandler hears every failure")
	noneCanceled(t, recs)
	warns := with(recs, slog.LevelWarn, "ratelimit: store failed")
	require.NotEmpty(t, warns, "the first failure is logged at once")
	assert.LessOrEqual(t, len(warns), 1+int(outageFor/outageLogEvery), "one Warn line each %v at most", outageLogEvery)
	first := warns[0]
	assert.Equal(t, "timeout", first.attrs["error_kind"], "the store timed out first: %+v", first)
	assert.Contains(t, first.attrs["error"], "ratelimit: store failed")
	assert.Contains(t, first.attrs["error"], context.DeadlineExceeded.Error(), "the store's error")
	ends := with(recs, slog.LevelInfo, "ratelimit: store decides again")
	require.Len(t, ends, 1, "the end of the outage, once")
	assert.Equal(t, fmt.Sprint(heard.Load()), ends[0].attrs["failures"], "every failure counted")
	assert.Len(t, recs, len(warns)+1, "nothing else logged")

	t.Run("port closed", func(t *testing.T) {
		srv.Kill()
		start := time.Now()
		c := Dial(t, addr)
		for i := range each {
			res := c.Do(t, RawRequest{Path: "/dead"})
			require.Equal(t, http.StatusOK, res.Status, "request %d fails open", i)
		}
		recs := deadLog.all()
		t.Logf("%d requests in %v, records: %+v", each, time.Since(start), recs)
		noneCanceled(t, recs)
		require.NotEmpty(t, recs, "the first failure is logged at once")
		assert.LessOrEqual(t, len(recs), 1+int(time.Since(start)/outageLogEvery))
		assert.Equal(t, slog.LevelWarn, recs[0].level)
		assert.Equal(t, "ratelimit: store failed", recs[0].msg)
		assert.Contains(t, recs[0].attrs["error"], "ratelimit: store failed: redisstore", "the store's error")
	})
}
