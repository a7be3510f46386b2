package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/keyfuncs"
)

// outageRecords is a slog.Handler keeping every record, with the time the
// test said it was written at.
type outageRecords struct {
	mu   sync.Mutex
	now  time.Time
	recs []outageRecord
}

type outageRecord struct {
	at    time.Time
	level slog.Level
	msg   string
	attrs map[string]slog.Value
}

func (h *outageRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *outageRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *outageRecords) WithGroup(string) slog.Handler            { return h }
func (h *outageRecords) Handle(_ context.Context, r slog.Record) error {
	rec := outageRecord{at: h.now, level: r.Level, msg: r.Message, attrs: map[string]slog.Value{}}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value; return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, rec)
	return nil
}

// outageRequest is the least keyfuncs.Request the outage account reads.
type outageRequest struct{ keyfuncs.Request }

func (outageRequest) Context() context.Context { return context.Background() }
func (outageRequest) Method() string           { return "GET" }
func (outageRequest) Route() string            { return "/" }

var (
	outageT0  = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	outageErr = errors.Join(limits.ErrStore, errors.New("redis: i/o timeout"))
)

// maxInMinute is the most records of recs written within any minute.
func maxInMinute(recs []outageRecord) int {
	most := 0
	for i := range recs {
		n := 0
		for j := i; j < len(recs) && recs[j].at.Sub(recs[i].at) <= time.Minute; j++ {
			n++
		}
		most = max(most, n)
	}
	return most
}

// TestOutageLogBounded drives one Flow's outage account on a clock of its
// own: a failure every 100 ms for three minutes writes the first at once,
// then one Warn line each 10 seconds counting the 99 left unlogged, at
// most 7 in any minute; the store deciding again writes one Info line,
// with every failure counted, and only once.
func TestOutageLogBounded(t *testing.T) {
	h := &outageRecords{}
	l := slog.New(h)
	o := newStoreOutage(outageT0)
	const failures = 1800
	for i := range failures {
		h.now = outageT0.Add(time.Duration(i) * 100 * time.Millisecond)
		o.failed(l, outageRequest{}, outageErr, "timeout", h.now)
	}
	require.Len(t, h.recs, 18, "one line each 10 s of 3 minutes")
	for i, r := range h.recs {
		assert.Equal(t, slog.LevelWarn, r.level, "line %d", i)
		assert.Equal(t, "ratelimit: store failed", r.msg, "line %d", i)
		assert.Equal(t, outageErr.Error(), r.attrs["error"].String(), "line %d names the store's error", i)
		assert.Equal(t, outageT0.Add(time.Duration(i)*outageEvery), r.at, "line %d", i)
		if i == 0 {
			assert.NotContains(t, r.attrs, "suppressed", "the first failure is logged at once")
			continue
		}
		assert.Equal(t, int64(99), r.attrs["suppressed"].Int64(), "line %d", i)
		assert.Equal(t, time.Duration(i)*outageEvery, r.attrs["down_for"].Duration(), "line %d", i)
	}
	assert.Equal(t, 7, maxInMinute(h.recs), "lines in any minute")

	h.now = outageT0.Add(3 * time.Minute)
	o.recovered(context.Background(), h.now)
	o.recovered(context.Background(), h.now.Add(time.Second))
	require.Len(t, h.recs, 19, "the end of the outage, once")
	end := h.recs[18]
	assert.Equal(t, slog.LevelInfo, end.level)
	assert.Equal(t, "ratelimit: store decides again", end.msg)
	assert.Equal(t, int64(failures), end.attrs["failures"].Int64())
	assert.Equal(t, 3*time.Minute, end.attrs["down_for"].Duration())

	// The next outage, after the 10 s, is logged at once.
	h.now = h.now.Add(time.Minute)
	o.failed(l, outageRequest{}, outageErr, "timeout", h.now)
	require.Len(t, h.recs, 20)
	assert.NotContains(t, h.recs[19].attrs, "suppressed", "the last outage's failures were counted in its end")
}

// TestOutageLogFlapping: a store that fails and recovers every second
// writes at most one Warn line each 10 seconds, and an Info line only
// after each of them: at most 14 lines in any minute. The failures of the
// outages left unlogged are counted in the next Warn line.
func TestOutageLogFlapping(t *testing.T) {
	h := &outageRecords{}
	l := slog.New(h)
	o := newStoreOutage(outageT0)
	for i := range 300 {
		h.now = outageT0.Add(time.Duration(i) * time.Second)
		o.failed(l, outageRequest{}, outageErr, "error", h.now)
		h.now = h.now.Add(500 * time.Millisecond)
		o.recovered(context.Background(), h.now)
	}
	var warns, infos []outageRecord
	for _, r := range h.recs {
		if r.level == slog.LevelWarn {
			warns = append(warns, r)
		} else {
			infos = append(infos, r)
		}
	}
	assert.Len(t, warns, 30, "one each 10 s of 5 minutes")
	assert.Len(t, infos, 30, "one after each Warn line")
	assert.LessOrEqual(t, maxInMinute(warns), 7)
	assert.LessOrEqual(t, maxInMinute(h.recs), 14)
	for i, w := range warns[1:] {
		assert.Equal(t, int64(9), w.attrs["suppressed"].Int64(), "Warn line %d: the 9 outages unlogged before it", i+1)
	}
}

// TestOutageLogConcurrent: failures heard at once from many goroutines
// write one line, and the end counts each of them.
func TestOutageLogConcurrent(t *testing.T) {
	h := &outageRecords{now: outageT0}
	l := slog.New(h)
	o := newStoreOutage(outageT0)
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				o.failed(l, outageRequest{}, outageErr, "timeout", outageT0.Add(time.Second))
			}
		})
	}
	wg.Wait()
	o.recovered(context.Background(), outageT0.Add(2*time.Second))
	require.Len(t, h.recs, 2)
	assert.Equal(t, slog.LevelWarn, h.recs[0].level)
	assert.Equal(t, int64(goroutines*each), h.recs[1].attrs["failures"].Int64())
}
