package headers

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
)

var (
	t0  = time.Unix(1_700_000_000, 0)
	all = Config{XRateLimit: true, Draft6: true, Structured: true, RetryAfter: true}

	apiPolicy = core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 100, Window: time.Minute}

	// allowedDecision has a reset that is not a whole number of seconds.
	allowedDecision = core.Decision{Allowed: true, Limit: 100, Remaining: 42, ResetAfter: 1001 * time.Millisecond, Policy: apiPolicy}
	// deniedDecision may retry in a millisecond: Retry-After rounds it up.
	deniedDecision = core.Decision{Limit: 100, ResetAfter: 30 * time.Second, RetryAfter: time.Millisecond, Policy: apiPolicy}
)

// written returns the fields a new Writer of cfg sets, one value each.
func written(d core.Decision, now time.Time, cfg Config) map[string]string {
	h := http.Header{}
	NewWriter(cfg).Write(h, d, nil, now)
	m := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) != 1 {
			panic("field " + k + " written more than once")
		}
		m[k] = vs[0]
	}
	return m
}

func TestWriteValues(t *testing.T) {
	bucket := core.Policy{Name: "tb", Algorithm: core.TokenBucket, Limit: 10, Window: time.Second, Burst: 20}
	tests := []struct {
		name string
		d    core.Decision
		now  time.Time
		want map[string]string
	}{{
		name: "allowed, reset rounded up",
		d:    allowedDecision,
		now:  t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "100", "X-Ratelimit-Remaining": "42", "X-Ratelimit-Reset": "1700000002",
			"Ratelimit-Limit": "100", "Ratelimit-Remaining": "42", "Ratelimit-Reset": "2",
			"Ratelimit": `"api";r=42;t=2`, "Ratelimit-Policy": `"api";q=100;w=60`,
		},
	}, {
		name: "denied, retry rounded up to 1",
		d:    deniedDecision,
		now:  t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "100", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "1700000030",
			"Ratelimit-Limit": "100", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "30",
			"Ratelimit": `"api";r=0;t=30`, "Ratelimit-Policy": `"api";q=100;w=60`,
			"Retry-After": "1",
		},
	}, {
		name: "quota whole: resets are 0 and now",
		d:    core.Decision{Allowed: true, Limit: 100, Remaining: 100, Policy: apiPolicy},
		now:  t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "100", "X-Ratelimit-Remaining": "100", "X-Ratelimit-Reset": "1700000000",
			"Ratelimit-Limit": "100", "Ratelimit-Remaining": "100", "Ratelimit-Reset": "0",
			"Ratelimit": `"api";r=100;t=0`, "Ratelimit-Policy": `"api";q=100;w=60`,
		},
	}, {
		name: "epoch reset rounds the sum up, not each part",
		d:    core.Decision{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 1200 * time.Millisecond, Policy: apiPolicy},
		now:  t0.Add(900 * time.Millisecond),
		want: map[string]string{
			"X-Ratelimit-Limit": "100", "X-Ratelimit-Remaining": "99", "X-Ratelimit-Reset": "1700000003",
			"Ratelimit-Limit": "100", "Ratelimit-Remaining": "99", "Ratelimit-Reset": "2",
			"Ratelimit": `"api";r=99;t=2`, "Ratelimit-Policy": `"api";q=100;w=60`,
		},
	}, {
		name: "denied with a long retry",
		d:    core.Decision{Limit: 100, ResetAfter: time.Hour, RetryAfter: 90*time.Second + time.Millisecond, Policy: apiPolicy},
		now:  t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "100", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "1700003600",
			"Ratelimit-Limit": "100", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "3600",
			"Ratelimit": `"api";r=0;t=3600`, "Ratelimit-Policy": `"api";q=100;w=60`,
			"Retry-After": "91",
		},
	}, {
		name: "bucket: Limit is the burst, q and w the rate",
		d:    core.Decision{Allowed: true, Limit: 20, Remaining: 19, ResetAfter: 100 * time.Millisecond, Policy: bucket},
		now:  t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "20", "X-Ratelimit-Remaining": "19", "X-Ratelimit-Reset": "1700000001",
			"Ratelimit-Limit": "20", "Ratelimit-Remaining": "19", "Ratelimit-Reset": "1",
			"Ratelimit": `"tb";r=19;t=1`, "Ratelimit-Policy": `"tb";q=10;w=1`,
		},
	}, {
		name: "sub-second window is advertised as one second",
		d: core.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 100 * time.Millisecond,
			Policy: core.Policy{Name: "fast", Algorithm: core.FixedWindow, Limit: 5, Window: 200 * time.Millisecond}},
		now: t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "4", "X-Ratelimit-Reset": "1700000001",
			"Ratelimit-Limit": "5", "Ratelimit-Remaining": "4", "Ratelimit-Reset": "1",
			"Ratelimit": `"fast";r=4;t=1`, "Ratelimit-Policy": `"fast";q=5;w=1`,
		},
	}, {
		name: "window rounded up",
		d: core.Decision{Allowed: true, Limit: 5, Remaining: 5,
			Policy: core.Policy{Name: "w", Algorithm: core.FixedWindow, Limit: 5, Window: 1500 * time.Millisecond}},
		now: t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "5", "X-Ratelimit-Reset": "1700000000",
			"Ratelimit-Limit": "5", "Ratelimit-Remaining": "5", "Ratelimit-Reset": "0",
			"Ratelimit": `"w";r=5;t=0`, "Ratelimit-Policy": `"w";q=5;w=2`,
		},
	}, {
		name: "negative values, which no store returns, are written as 0",
		d:    core.Decision{Limit: -1, Remaining: -5, ResetAfter: -time.Second, RetryAfter: -time.Second, Policy: apiPolicy},
		now:  t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "0", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "1700000000",
			"Ratelimit-Limit": "0", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "0",
			"Ratelimit": `"api";r=0;t=0`, "Ratelimit-Policy": `"api";q=100;w=60`,
			"Retry-After": "1",
		},
	}, {
		name: "unvalidated name: quote and backslash escaped",
		d:    core.Decision{Allowed: true, Limit: 1, Remaining: 1, Policy: core.Policy{Name: `a"b\c`, Limit: 1, Window: time.Second}},
		now:  t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "1", "X-Ratelimit-Remaining": "1", "X-Ratelimit-Reset": "1700000000",
			"Ratelimit-Limit": "1", "Ratelimit-Remaining": "1", "Ratelimit-Reset": "0",
			"Ratelimit": `"a\"b\\c";r=1;t=0`, "Ratelimit-Policy": `"a\"b\\c";q=1;w=1`,
		},
	}, {
		name: "unvalidated name with CR LF: structured fields left out",
		d:    core.Decision{Allowed: true, Limit: 1, Remaining: 1, Policy: core.Policy{Name: "a\r\nSet-Cookie: x", Limit: 1, Window: time.Second}},
		now:  t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "1", "X-Ratelimit-Remaining": "1", "X-Ratelimit-Reset": "1700000000",
			"Ratelimit-Limit": "1", "Ratelimit-Remaining": "1", "Ratelimit-Reset": "0",
		},
	}, {
		name: "no policy in the decision: RateLimit-Policy left out",
		d:    core.Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: time.Second},
		now:  t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "3", "X-Ratelimit-Remaining": "2", "X-Ratelimit-Reset": "1700000001",
			"Ratelimit-Limit": "3", "Ratelimit-Remaining": "2", "Ratelimit-Reset": "1",
			"Ratelimit": `"";r=2;t=1`,
		},
	}, {
		name: "failed open: nothing at all",
		d:    core.Decision{Allowed: true, Limit: 100, Remaining: 100, Policy: apiPolicy, Source: core.SourceFailMode},
		now:  t0,
		want: map[string]string{},
	}, {
		name: "failed closed: written like any denial",
		d:    core.Decision{Limit: 100, RetryAfter: time.Second, Policy: apiPolicy, Source: core.SourceFailMode},
		now:  t0,
		want: map[string]string{
			"X-Ratelimit-Limit": "100", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "1700000000",
			"Ratelimit-Limit": "100", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "0",
			"Ratelimit": `"api";r=0;t=0`, "Ratelimit-Policy": `"api";q=100;w=60`,
			"Retry-After": "1",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, written(tt.d, tt.now, all))
		})
	}
}

// TestWriteFamilies turns every combination of families on and checks that
// Write sets exactly their fields.
func TestWriteFamilies(t *testing.T) {
	families := []struct {
		on     func(*Config)
		fields []string
	}{
		{func(c *Config) { c.XRateLimit = true }, []string{canonXRateLimitLimit, canonXRateLimitRemaining, canonXRateLimitReset}},
		{func(c *Config) { c.Draft6 = true }, []string{canonRateLimitLimit, canonRateLimitRemaining, canonRateLimitReset}},
		{func(c *Config) { c.Structured = true }, []string{canonRateLimit, canonRateLimitPolicy}},
		{func(c *Config) { c.RetryAfter = true }, []string{canonRetryAfter}},
	}
	for mask := range 1 << len(families) {
		var cfg Config
		var want []string
		for i, f := range families {
			if mask&(1<<i) != 0 {
				f.on(&cfg)
				want = append(want, f.fields...)
			}
		}
		slices.Sort(want)
		for _, d := range []core.Decision{allowedDecision, deniedDecision} {
			got := slices.Sorted(maps.Keys(written(d, t0, cfg)))
			wantHere := want
			if d.Allowed {
				wantHere = slices.DeleteFunc(slices.Clone(want), func(k string) bool { return k == canonRetryAfter })
			}
			assert.ElementsMatch(t, wantHere, got, "%+v, allowed %v", cfg, d.Allowed)
			if len(written(core.Decision{Allowed: true, Source: core.SourceFailMode, Limit: 1, Remaining: 1, Policy: apiPolicy}, t0, cfg)) != 0 {
				t.Errorf("%+v: a failed-open decision wrote fields", cfg)
			}
		}
	}
}

func TestWriteZeroNowIsTimeNow(t *testing.T) {
	before := time.Now().Unix()
	got := written(allowedDecision, time.Time{}, Config{XRateLimit: true})
	after := time.Now().Unix() + 3 // ResetAfter 1001ms, rounded up, plus a second of slack
	n, err := count(canonXRateLimitReset, got[canonXRateLimitReset])
	require.NoError(t, err, canonXRateLimitReset)
	assert.GreaterOrEqual(t, n, before+2, canonXRateLimitReset)
	assert.LessOrEqual(t, n, after, canonXRateLimitReset)
}

// countingSetter is a Setter that keeps nothing, so that the benchmark
// counts write's own allocations only.
type countingSetter struct{ n int }

func (s *countingSetter) Set(key, value string) { s.n += len(value) }

func BenchmarkWrite(b *testing.B) {
	bucket := core.Decision{Allowed: true, Limit: 1000, Remaining: 999, ResetAfter: 3599 * time.Millisecond,
		Policy: core.Policy{Name: "per-user", Algorithm: core.TokenBucket, Limit: 1000, Window: time.Hour}}
	cases := []struct {
		name string
		d    core.Decision
		cfg  Config
	}{
		{"default/allowed", allowedDecision, defaultConfig},
		{"default/denied", deniedDecision, defaultConfig},
		{"default/allowed-large", bucket, defaultConfig},
		{"all/allowed", allowedDecision, all},
		{"structured/allowed", allowedDecision, Config{Structured: true}},
	}
	for _, c := range cases {
		b.Run(c.name+"/http.Header", func(b *testing.B) {
			h := http.Header{}
			b.ReportAllocs()
			for b.Loop() {
				write(h, &c.d, t0, c.cfg)
			}
		})
		b.Run(c.name+"/counting-setter", func(b *testing.B) {
			s := &countingSetter{}
			b.ReportAllocs()
			for b.Loop() {
				write(s, &c.d, t0, c.cfg)
			}
		})
		b.Run(c.name+"/HeaderMap", func(b *testing.B) {
			m := mapResponse{http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				write(m, &c.d, t0, c.cfg)
			}
		})
	}
}

// mapResponse is a fastMap, as the adapters' responses are.
type mapResponse struct{ h http.Header }

func (m mapResponse) Set(k, v string)        { m.h.Set(k, v) }
func (m mapResponse) HeaderMap() http.Header { return m.h }

// TestWriteSpelling: a fastMap gets the names as the standards spell
// them, which net/http writes on the wire as they are; an http.Header gets
// them canonical, as its Set would; a Setter as the standards spell them.
// Every path writes the same values.
func TestWriteSpelling(t *testing.T) {
	d := deniedDecision
	d.Policy = core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute}
	w := NewWriter(all)
	m := mapResponse{http.Header{}}
	w.Write(m, d, nil, t0)
	plain := http.Header{}
	w.Write(plain, d, nil, t0)
	s := &recordingSetter{}
	w.Write(s, d, nil, t0)
	require.Len(t, m.h, 9)
	require.Len(t, plain, 9)
	for _, name := range wireFields() {
		require.Contains(t, m.h, name, "HeaderMap: %s as spelled", name)
		require.Len(t, m.h[name], 1)
		require.Contains(t, plain, http.CanonicalHeaderKey(name), "http.Header: %s canonical", name)
		assert.Equal(t, m.h[name], plain[http.CanonicalHeaderKey(name)], name)
		assert.Equal(t, m.h[name][0], s.m[name], "Setter: %s", name)
	}
	var wire strings.Builder
	require.NoError(t, m.h.Write(&wire))
	for _, line := range []string{"X-RateLimit-Limit: 100\r\n", "RateLimit-Remaining: 0\r\n", "RateLimit-Policy: \"api\";q=10;w=60\r\n", "Retry-After: "} {
		assert.Contains(t, wire.String(), line)
	}
	// Appending to one value slice cannot reach another's.
	limit, remaining := wireFields()[0], wireFields()[1] // as spelled, not canonical
	m.h[limit] = append(m.h[limit], "x")
	assert.Equal(t, []string{"0"}, m.h[remaining])
}

// recordingSetter keeps what it is set.
type recordingSetter struct{ m map[string]string }

func (r *recordingSetter) Set(k, v string) {
	if r.m == nil {
		r.m = map[string]string{}
	}
	r.m[k] = v
}

// wireFields returns every field name the writer may write, as it spells
// them on the wire, in the order it writes them.
func wireFields() []string {
	return []string{
		wireXRateLimitLimit, wireXRateLimitRemaining, wireXRateLimitReset,
		wireRateLimitLimit, wireRateLimitRemaining, wireRateLimitReset,
		wireRateLimit, wireRateLimitPolicy, wireRetryAfter,
	}
}

// The fast paths are matched by method set: these types of the tests
// qualify, as the adapters' responses do (their tests assert it).
var (
	_ fastMap     = mapResponse{}
	_ fastBytes   = (*bytesSetter)(nil)
	_ fastIntPair = (*pairSetter)(nil)
)

// The fast paths' method sets are exactly these, which the adapters'
// tests assert of their responses with the same interface literals:
// assignable both ways, the interfaces are identical.
type (
	mapShape = interface {
		Set(key, value string)
		HeaderMap() http.Header
	}
	bytesShape = interface {
		Set(key, value string)
		SetBytes(key string, value []byte)
		SetInt(key string, n int64)
		SetIntPair(key1, key2 string, n int64)
	}
)

var (
	_ fastMap     = mapShape(nil)
	_ mapShape    = fastMap(nil)
	_ fastIntPair = bytesShape(nil)
	_ bytesShape  = fastIntPair(nil)
	_ fastBytes   = bytesShape(nil)
)

// defaultConfig is the HTTP flow's default (httplimit.WithHeaders): the
// fields most clients read today.
var defaultConfig = Config{XRateLimit: true, Draft6: true, RetryAfter: true}
