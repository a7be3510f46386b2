package headers

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

// writerConfigs is every combination of the four families.
func writerConfigs() []Config {
	var cs []Config
	for i := range 16 {
		cs = append(cs, Config{XRateLimit: i&1 != 0, Draft6: i&2 != 0, Structured: i&4 != 0, RetryAfter: i&8 != 0})
	}
	return cs
}

// writerDecisions are decisions whose values repeat, change and go
// negative, in an order that makes the Writer share, then not.
func writerDecisions() []core.Decision {
	bucket := core.Decision{Allowed: true, Limit: 1000, Remaining: 999, ResetAfter: 3599 * time.Millisecond,
		Policy: core.Policy{Name: "per-user", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Hour}}
	ds := []core.Decision{allowedDecision, allowedDecision, deniedDecision, allowedDecision, bucket, bucket}
	for i := range 5 {
		d := bucket
		d.Remaining -= int64(i)
		d.ResetAfter += time.Duration(i) * 700 * time.Millisecond
		ds = append(ds, d, d)
	}
	for i := range 3 { // earlier resets of the same Limit: Limit borrowed
		d := bucket
		d.Remaining -= int64(10 * i)
		d.ResetAfter = time.Duration(i) * 300 * time.Millisecond
		ds = append(ds, d)
	}
	ds = append(ds,
		core.Decision{Allowed: true, Limit: -1, Remaining: -5, ResetAfter: -time.Second},
		core.Decision{Allowed: true, Limit: 1 << 62, Remaining: 1<<62 - 1, ResetAfter: 1 << 62},
		core.Decision{Allowed: true, Source: core.SourceFailMode, Limit: 10, Remaining: 10},
		core.Decision{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: 0},
		allowedDecision, bucket)
	return ds
}

// TestWriterIsWrite: a Writer sets exactly what write sets, for every
// Config, on a HeaderMap, an http.Header and a plain Setter, response
// after response, at times that move on and back.
func TestWriterIsWrite(t *testing.T) {
	times := []time.Time{t0, t0, t0.Add(400 * time.Millisecond), t0.Add(2 * time.Second), t0, {}}
	for _, cfg := range writerConfigs() {
		w := NewWriter(cfg)
		for i, d := range writerDecisions() {
			now := times[i%len(times)]
			if now.IsZero() && cfg.XRateLimit {
				now = t0.Add(time.Hour) // Write would read the clock
			}
			want, got := mapResponse{http.Header{}}, mapResponse{http.Header{}}
			write(want, &d, now, cfg)
			w.Write(got, d, nil, now)
			require.Equal(t, want.h, got.h, "%+v, decision %d: HeaderMap", cfg, i)

			wantH, gotH := http.Header{}, http.Header{}
			write(wantH, &d, now, cfg)
			w.Write(gotH, d, nil, now)
			require.Equal(t, wantH, gotH, "%+v, decision %d: http.Header", cfg, i)

			wantS, gotS := &recordingSetter{}, &recordingSetter{}
			write(wantS, &d, now, cfg)
			w.Write(gotS, d, nil, now)
			require.Equal(t, wantS.m, gotS.m, "%+v, decision %d: Setter", cfg, i)

			gotB := &bytesSetter{}
			w.Write(gotB, d, nil, now)
			require.Equal(t, wantS.m, gotB.m, "%+v, decision %d: BytesSetter", cfg, i)
			gotB.m = nil
			write(gotB, &d, now, cfg)
			require.Equal(t, wantS.m, gotB.m, "%+v, decision %d: BytesSetter, Write", cfg, i)
		}
	}
}

// TestWriterShares: values that repeat share the last block's text, the
// value slices stay apart, and a response costs one allocation.
func TestWriterShares(t *testing.T) {
	w := NewWriter(defaultConfig)
	a, b := mapResponse{http.Header{}}, mapResponse{http.Header{}}
	w.Write(a, allowedDecision, nil, t0)
	last := w.last.Load()
	require.NotNil(t, last)
	d := allowedDecision
	d.Remaining--
	w.Write(b, d, nil, t0)
	assert.Same(t, last, w.last.Load(), "a block that borrows is not the last one")
	limit, remaining := wireXRateLimitLimit, wireXRateLimitRemaining
	assert.Equal(t, []string{"100"}, b.h[limit])
	assert.Equal(t, []string{"41"}, b.h[remaining])
	assert.Equal(t, []string{"42"}, a.h[remaining])
	assert.Same(t, unsafeStringData(a.h[limit][0]), unsafeStringData(b.h[limit][0]), "Limit's text is shared")
	// Appending to one value slice cannot reach another's.
	b.h[limit] = append(b.h[limit], "x")
	assert.Equal(t, []string{"41"}, b.h[remaining])
	assert.Equal(t, []string{"100"}, a.h[limit])
	assert.Equal(t, []string{"100"}, b.h[wireFields()[3]], "RateLimit-Limit")

	// A new reset: formatted in full, and the last block from then on.
	w.Write(b, allowedDecision, nil, t0.Add(time.Second))
	assert.NotSame(t, last, w.last.Load())

	h := http.Header{}
	allocs := testing.AllocsPerRun(100, func() {
		clear(h)
		w.Write(mapResponse{h}, d, nil, t0.Add(time.Second))
	})
	assert.Equal(t, 1.0, allocs)
	allocs = testing.AllocsPerRun(100, func() {
		clear(h)
		w.Write(h, d, nil, t0.Add(time.Second))
	})
	assert.Equal(t, 1.0, allocs, "http.Header")
}

// bytesSetter is a BytesSetter that keeps a copy of what it is set.
type bytesSetter struct{ m map[string]string }

func (s *bytesSetter) Set(k, v string) {
	if s.m == nil {
		s.m = map[string]string{}
	}
	s.m[k] = v
}

func (s *bytesSetter) SetBytes(k string, v []byte) { s.Set(k, string(v)) }
func (s *bytesSetter) SetInt(k string, n int64)    { s.Set(k, strconv.FormatInt(n, 10)) }

// TestWriterBytes: a BytesSetter's fields cost no allocation, whether the
// last block holds their text or not; a later reset of the same Limit
// makes a new last block, another Limit does not.
func TestWriterBytes(t *testing.T) {
	w := NewWriter(defaultConfig)
	s := &countingBytesSetter{}
	d := allowedDecision
	w.Write(s, d, nil, t0)
	last := w.last.Load()
	require.NotNil(t, last, "the first decision makes the last block")
	assert.Zero(t, testing.AllocsPerRun(100, func() { w.Write(s, d, nil, t0) }), "shared")
	other := d
	other.Limit = 7
	assert.Zero(t, testing.AllocsPerRun(100, func() { w.Write(s, other, nil, t0) }), "another Limit")
	earlier := d
	earlier.ResetAfter = 0
	assert.Zero(t, testing.AllocsPerRun(100, func() { w.Write(s, earlier, nil, t0) }), "an earlier reset")
	assert.Same(t, last, w.last.Load())
	w.Write(s, d, nil, t0.Add(time.Second))
	assert.NotSame(t, last, w.last.Load(), "a later reset")
}

// countingBytesSetter counts the bytes it is set, without allocating.
type countingBytesSetter struct{ n int }

func (s *countingBytesSetter) Set(_, v string)             { s.n += len(v) }
func (s *countingBytesSetter) SetBytes(_ string, v []byte) { s.n += len(v) }
func (s *countingBytesSetter) SetInt(_ string, n int64)    { s.n += int(n % 10) }

// pairSetter is a bytesSetter that is an IntPairSetter, and counts the
// calls of SetIntPair.
type pairSetter struct {
	bytesSetter
	pairs [][2]string
}

func (s *pairSetter) SetIntPair(k1, k2 string, n int64) {
	s.pairs = append(s.pairs, [2]string{k1, k2})
	s.Set(k1, strconv.FormatInt(n, 10))
	s.Set(k2, strconv.FormatInt(n, 10))
}

// TestWriterIntPair: an IntPairSetter has both Remaining fields set by one
// SetIntPair, when both families are written and the last block holds the
// other values, and the same fields as any BytesSetter.
func TestWriterIntPair(t *testing.T) {
	for _, cfg := range []Config{defaultConfig, {XRateLimit: true}, {Draft6: true}} {
		w := NewWriter(cfg)
		for i, d := range []core.Decision{allowedDecision, allowedDecision, func() core.Decision { d := allowedDecision; d.Limit = 7; return d }()} {
			want, got := &bytesSetter{}, &pairSetter{}
			write(want, &d, t0, cfg)
			w.Write(got, d, nil, t0)
			assert.Equal(t, want.m, got.m, "%+v, decision %d", cfg, i)
			switch {
			case cfg.XRateLimit && cfg.Draft6 && d.Limit == allowedDecision.Limit:
				assert.Equal(t, [][2]string{{"X-RateLimit-Remaining", "RateLimit-Remaining"}}, got.pairs, "%+v, decision %d", cfg, i)
			default:
				assert.Empty(t, got.pairs, "%+v, decision %d", cfg, i)
			}
		}
	}
}

// TestWriterBytesExtremes: a fastBytes gets the last block's text of
// the longest numbers (a Limit of 19 digits, an X-RateLimit-Reset of 19
// before 1970, the longest ResetAfter) as write sets them, for every
// Config.
func TestWriterBytesExtremes(t *testing.T) {
	d := core.Decision{Allowed: true, Limit: math.MaxInt64, Remaining: math.MaxInt64 - 1, ResetAfter: math.MaxInt64}
	now := time.Unix(-1<<62, 0)
	for _, cfg := range []Config{defaultConfig, {XRateLimit: true}, {Draft6: true}} {
		for _, s := range []fastBytes{&bytesSetter{}, &pairSetter{}} {
			w := NewWriter(cfg)
			want := &bytesSetter{}
			write(want, &d, now, cfg)
			for range 2 { // the first makes the last block, the second shares it
				w.Write(s, d, nil, now)
			}
			got := s.(interface{ values() map[string]string }).values()
			assert.Equal(t, want.m, got, "%+v %T", cfg, s)
		}
	}
}

func (s *bytesSetter) values() map[string]string { return s.m }

// TestWriterBackwards: a decision whose reset is earlier than the last
// block's does not displace it; a later one does.
func TestWriterBackwards(t *testing.T) {
	w := NewWriter(defaultConfig)
	h := http.Header{}
	w.Write(h, allowedDecision, nil, t0.Add(time.Minute))
	last := w.last.Load()
	w.Write(h, allowedDecision, nil, t0)
	assert.Same(t, last, w.last.Load())
	w.Write(h, allowedDecision, nil, t0.Add(2*time.Minute))
	assert.NotSame(t, last, w.last.Load())
}

// TestWriterConcurrent writes from several goroutines, with values that
// share and values that do not (run with -race).
func TestWriterConcurrent(t *testing.T) {
	w := NewWriter(defaultConfig)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				d := allowedDecision
				d.Remaining = int64(i)
				d.ResetAfter = time.Duration(g) * time.Second
				now := t0.Add(time.Duration(i/500) * time.Second)
				want, got := http.Header{}, http.Header{}
				write(want, &d, now, defaultConfig)
				w.Write(got, d, nil, now)
				if !assert.Equal(t, want, got) {
					return
				}
				wantS, gotB := &recordingSetter{}, &bytesSetter{}
				write(wantS, &d, now, defaultConfig)
				w.Write(gotB, d, nil, now)
				if !assert.Equal(t, wantS.m, gotB.m) {
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkWriter(b *testing.B) {
	bucket := core.Decision{Allowed: true, Limit: 1_000_000_000, Remaining: 999_999_999, ResetAfter: 59 * time.Millisecond}
	// Clients of different fill levels taking turns: their resets differ.
	clients := make([]core.Decision, 64)
	for i := range clients {
		clients[i] = core.Decision{Allowed: true, Limit: 1000, Remaining: int64(1000 - 10*i), ResetAfter: time.Duration(i) * 3600 * time.Millisecond}
	}
	for _, name := range []string{"Write", "Writer"} {
		b.Run("default/HeaderMap/clients/"+name, func(b *testing.B) {
			w := NewWriter(defaultConfig)
			h := http.Header{}
			m := mapResponse{h}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				clear(h)
				d := clients[i%len(clients)]
				i++
				if name == "Write" {
					write(m, &d, t0, defaultConfig)
				} else {
					w.Write(m, d, nil, t0)
				}
			}
		})
	}
	for _, name := range []string{"Write", "Writer"} {
		b.Run("default/HeaderMap/"+name, func(b *testing.B) {
			w := NewWriter(defaultConfig)
			h := http.Header{}
			m := mapResponse{h}
			b.ReportAllocs()
			for b.Loop() {
				clear(h)
				if name == "Write" {
					write(m, &bucket, t0, defaultConfig)
				} else {
					w.Write(m, bucket, nil, t0)
				}
			}
		})
	}
}

// copyingSetter is a fastIntPair that copies what it is set into a
// buffer of its own, as fasthttp's header (Fiber's response) does, without
// allocating.
type copyingSetter struct {
	buf [64]byte
	n   int
}

func (s *copyingSetter) Set(_, v string)             { s.n = copy(s.buf[:], v) }
func (s *copyingSetter) SetBytes(_ string, v []byte) { s.n = copy(s.buf[:], v) }
func (s *copyingSetter) SetInt(_ string, n int64)    { s.n = len(strconv.AppendInt(s.buf[:0], n, 10)) }
func (s *copyingSetter) SetIntPair(k1, k2 string, n int64) {
	s.SetInt(k1, n)
	s.SetInt(k2, n)
}

// BenchmarkWriterBytes is Writer.Write on a fastIntPair that copies, as
// Fiber's response is: the shared text of the last block (Limit and the
// resets, SetBytes) and Remaining (SetIntPair).
func BenchmarkWriterBytes(b *testing.B) {
	d := core.Decision{Allowed: true, Limit: 1000, Remaining: 999, ResetAfter: 59 * time.Second}
	w := NewWriter(defaultConfig)
	s := &copyingSetter{}
	b.ReportAllocs()
	for b.Loop() {
		w.Write(s, d, nil, t0)
	}
}

// unsafeStringData is the address of s's text.
func unsafeStringData(s string) *byte { return unsafe.StringData(s) }

// TestWriterNow: the Writer's clock is the wall clock, advanced by the
// monotonic clock for at most a second before it is read again.
func TestWriterNow(t *testing.T) {
	w := NewWriter(defaultConfig)
	for range 3 {
		before := time.Now().UnixNano()
		got := w.nowUnixNano()
		after := time.Now().UnixNano()
		assert.GreaterOrEqual(t, got, before)
		assert.LessOrEqual(t, got, after)
	}
	stale := &wallReading{at: time.Now().Add(-2 * time.Second)}
	stale.unixNs = stale.at.UnixNano()
	w.wall.Store(stale)
	before := time.Now().UnixNano()
	assert.GreaterOrEqual(t, w.nowUnixNano(), before, "a reading two seconds old is not used")
	assert.NotSame(t, stale, w.wall.Load())
	// A reading without a monotonic clock, as after a step, is not
	// advanced past the wall clock either.
	at := time.Unix(0, before)
	w.wall.Store(&wallReading{at: at, unixNs: before})
	assert.GreaterOrEqual(t, w.nowUnixNano(), before)
}

// TestWriterClockReset: with the time left to the Writer, X-RateLimit-Reset
// is the current time plus ResetAfter, rounded up, for every ResetAfter.
func TestWriterClockReset(t *testing.T) {
	w := NewWriter(defaultConfig)
	for _, after := range []time.Duration{0, 1, time.Millisecond, 999 * time.Millisecond, time.Second, 90 * time.Minute, maxFastReset - 1, maxFastReset, 1<<63 - 1} {
		d := allowedDecision
		d.ResetAfter = after
		before := time.Now()
		_, xreset, _ := w.numbers(&d, time.Time{})
		after2 := time.Now()
		assert.GreaterOrEqual(t, xreset, ceilUnix(before.Add(after)), "%v", after)
		assert.LessOrEqual(t, xreset, ceilUnix(after2.Add(after)), "%v", after)
		_, atT0, _ := w.numbers(&d, t0)
		assert.Equal(t, ceilUnix(t0.Add(after)), atT0, "%v: an explicit time", after)
	}
}

// TestWriterMonotonicNow: a now that carries a monotonic reading (a memory
// store's core.TimedStore time, whose wall time was fixed when the store
// was made) takes its wall time from the Writer's last reading of the wall
// clock, when that is less than a second older, and from the clock
// otherwise; a now without one is used as it is. Every family's reset, and
// a denial's, follow.
func TestWriterMonotonicNow(t *testing.T) {
	d := allowedDecision
	d.ResetAfter = 2 * time.Second
	denied := d
	denied.Allowed, denied.Remaining, denied.RetryAfter = false, 0, time.Second
	xreset := func(w *Writer, d core.Decision, now time.Time) int64 {
		h := http.Header{}
		w.Write(mapResponse{h}, d, nil, now)
		name := wireFields()[2] // X-RateLimit-Reset, as spelled
		require.Len(t, h[name], 1, "%v", h)
		n, err := strconv.ParseInt(h[name][0], 10, 64)
		require.NoError(t, err)
		return n
	}
	for _, dec := range []core.Decision{d, denied} {
		w := NewWriter(defaultConfig)
		// The wall clock stepped 10 s forward since the store's clock was
		// set: the Writer's reading has the step.
		anchor := time.Now()
		stepped := anchor.UnixNano() + 10e9
		w.wall.Store(&wallReading{at: anchor, unixNs: stepped})
		now := anchor.Add(300 * time.Millisecond)
		want := (stepped + int64(300*time.Millisecond) + int64(dec.ResetAfter) + 1e9 - 1) / 1e9
		assert.Equal(t, want, xreset(w, dec, now), "allowed %v: the wall time of the Writer's reading", dec.Allowed)
		assert.Equal(t, ceilUnix(now.Round(0).Add(dec.ResetAfter)), xreset(w, dec, now.Round(0)), "allowed %v: an explicit time", dec.Allowed)

		// A time over a second before the reading, which is recent, is
		// taken from it all the same.
		old := anchor.Add(-3 * time.Second)
		want = (stepped - int64(3*time.Second) + int64(dec.ResetAfter) + 1e9 - 1) / 1e9
		assert.Equal(t, want, xreset(w, dec, old), "allowed %v: an older time, from the recent reading", dec.Allowed)

		// A reading over a second old is not used: the clock is read.
		w.wall.Store(&wallReading{at: anchor.Add(-5 * time.Second), unixNs: stepped})
		before := time.Now()
		got := xreset(w, dec, time.Now())
		after := time.Now()
		assert.GreaterOrEqual(t, got, ceilUnix(before.Add(dec.ResetAfter)), "allowed %v", dec.Allowed)
		assert.LessOrEqual(t, got, ceilUnix(after.Add(dec.ResetAfter)), "allowed %v", dec.Allowed)
	}
}
