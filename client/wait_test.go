package client

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/headers"
)

var t0 = time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)

func TestServerWait(t *testing.T) {
	for _, tt := range []struct {
		name   string
		header map[string]string
		want   time.Duration
		told   bool
	}{
		{"none", nil, 0, false},
		{"retry-after seconds", map[string]string{"Retry-After": "3"}, 3 * time.Second, true},
		{"retry-after date", map[string]string{"Retry-After": t0.Add(5 * time.Second).Format(http.TimeFormat)}, 5 * time.Second, true},
		{"retry-after date in the past", map[string]string{"Retry-After": "Mon, 01 Jan 1990 00:00:00 GMT"}, 0, false},
		{"retry-after zero", map[string]string{"Retry-After": "0"}, 0, false},
		{"retry-after first", map[string]string{"Retry-After": "2", "RateLimit-Reset": "9"}, 2 * time.Second, true},
		{"structured", map[string]string{"RateLimit": `"api";r=0;t=7`}, 7 * time.Second, true},
		{"draft 6", map[string]string{"RateLimit-Reset": "4"}, 4 * time.Second, true},
		{"x-ratelimit epoch", map[string]string{"X-RateLimit-Reset": "1796230806"}, time.Unix(1796230806, 0).Sub(t0), true},
		{"malformed reset keeps retry-after", map[string]string{"Retry-After": "2", "RateLimit-Reset": "-1"}, 2 * time.Second, true},
		{"negative", map[string]string{"Retry-After": "-5"}, 0, false},
		{"fraction", map[string]string{"Retry-After": "1.5"}, 0, false},
		{"NaN", map[string]string{"RateLimit": `"api";r=0;t=NaN`}, 0, false},
		{"garbage", map[string]string{"Retry-After": "soon"}, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			d, told := serverWait(h, t0)
			assert.Equal(t, tt.told, told)
			assert.Equal(t, tt.want, d)
		})
	}
}

// TestServerWaitForms: how each form of the delay fields is read. A delay
// too long for a time.Duration is maxDuration (which every limit refuses),
// not malformed; anything but digits or an HTTP-date is malformed and
// ignored; a repeated field counts as its longest readable value; each
// field spoils only itself.
func TestServerWaitForms(t *testing.T) {
	at := func(d time.Duration, layout string) string {
		return strings.Replace(t0.Add(d).Format(layout), "UTC", "GMT", 1)
	}
	for _, tt := range []struct {
		name   string
		header http.Header
		want   time.Duration
		told   bool
	}{
		{"leading zeros", http.Header{"Retry-After": {"0000000000000000000000003"}}, 3 * time.Second, true},
		{"spaces around", http.Header{"Retry-After": {" 3\t"}}, 3 * time.Second, true},
		{"largest Duration in seconds", http.Header{"Retry-After": {"9223372036"}}, 9223372036 * time.Second, true},
		{"just over a Duration", http.Header{"Retry-After": {"9223372037"}}, maxDuration, true},
		{"MaxInt64 seconds", http.Header{"Retry-After": {"9223372036854775807"}}, maxDuration, true},
		{"30 digits", http.Header{"Retry-After": {strings.Repeat("9", 30)}}, maxDuration, true},
		{"one year", http.Header{"Retry-After": {"31536000"}}, 365 * 24 * time.Hour, true},
		{"empty", http.Header{"Retry-After": {""}}, 0, false},
		{"plus sign", http.Header{"Retry-After": {"+3"}}, 0, false},
		{"minus zero", http.Header{"Retry-After": {"-0"}}, 0, false},
		{"space within", http.Header{"Retry-After": {"3 3"}}, 0, false},
		{"unit", http.Header{"Retry-After": {"3s"}}, 0, false},
		{"exponent", http.Header{"Retry-After": {"3e2"}}, 0, false},
		{"non-ASCII digit", http.Header{"Retry-After": {"\u0663"}}, 0, false},
		{"repeated: the longest", http.Header{"Retry-After": {"2", "7"}}, 7 * time.Second, true},
		{"repeated: the readable one", http.Header{"Retry-After": {"soon", "2"}}, 2 * time.Second, true},
		{"IMF-fixdate", http.Header{"Retry-After": {at(5*time.Second, http.TimeFormat)}}, 5 * time.Second, true},
		{"RFC 850 date", http.Header{"Retry-After": {at(5*time.Second, time.RFC850)}}, 5 * time.Second, true},
		{"asctime date", http.Header{"Retry-After": {at(5*time.Second, time.ANSIC)}}, 5 * time.Second, true},
		{"year 9999", http.Header{"Retry-After": {"Fri, 31 Dec 9999 23:59:59 GMT"}}, time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Sub(t0), true},
		{"RFC 850 year 68 is 2068", http.Header{"Retry-After": {"Saturday, 31-Dec-68 23:59:59 GMT"}}, time.Date(2068, 12, 31, 23, 59, 59, 0, time.UTC).Sub(t0), true},
		// time.Parse reads a two-digit year 69 to 99 as 19xx: in the past.
		{"RFC 850 year 69 is 1969", http.Header{"Retry-After": {"Tuesday, 31-Dec-69 23:59:59 GMT"}}, 0, false},
		{"five-digit year", http.Header{"Retry-After": {"Fri, 31 Dec 99999 23:59:59 GMT"}}, 0, false},
		{"zero falls through to the reset", http.Header{"Retry-After": {"0"}, "Ratelimit-Reset": {"4"}}, 4 * time.Second, true},
		{"malformed falls through to the reset", http.Header{"Retry-After": {"soon"}, "Ratelimit-Reset": {"4"}}, 4 * time.Second, true},
		{"reset over a Duration", http.Header{"Ratelimit-Reset": {"9300000000"}}, maxDuration, true},
		{"structured first", http.Header{"Ratelimit": {`"api";r=0;t=7`}, "Ratelimit-Reset": {"4"}}, 7 * time.Second, true},
		{"malformed structured falls through", http.Header{"Ratelimit": {`"api";t=7`}, "Ratelimit-Reset": {"4"}}, 4 * time.Second, true},
		// headers.Parse rejects a t over a Duration as malformed (the
		// client cannot read RFC 9651 fields itself): ignored.
		{"structured t over a Duration", http.Header{"Ratelimit": {`"api";r=0;t=9300000000`}}, 0, false},
		{"epoch MaxInt64", http.Header{"X-Ratelimit-Reset": {"9223372036854775807"}}, maxDuration, true},
		{"epoch of 30 digits", http.Header{"X-Ratelimit-Reset": {strings.Repeat("9", 30)}}, maxDuration, true},
		{"epoch 292 years ahead", http.Header{"X-Ratelimit-Reset": {strconv.FormatInt(t0.Unix()+maxDelaySeconds, 10)}}, maxDuration / time.Second * time.Second, true},
		{"epoch in the past", http.Header{"X-Ratelimit-Reset": {"1"}}, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, told := serverWait(tt.header, t0)
			assert.Equal(t, tt.told, told)
			assert.Equal(t, tt.want, d)
		})
	}
}

// FuzzDigits checks digits against strconv, saturating at MaxInt64.
func FuzzDigits(f *testing.F) {
	for _, s := range []string{"", "0", "007", "9223372036854775807", "9223372036854775808", strings.Repeat("9", 40), "+1", "-1", "1_0", " 1", "1x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, ok := digits(v)
		want, err := strconv.ParseInt(v, 10, 64)
		plain := v != "" && strings.Trim(v, "0123456789") == ""
		switch {
		case !plain:
			assert.False(t, ok, "%q", v)
		case errors.Is(err, strconv.ErrRange):
			assert.True(t, ok, "%q", v)
			assert.Equal(t, int64(math.MaxInt64), n, "%q", v)
		default:
			require.NoError(t, err)
			assert.True(t, ok, "%q", v)
			assert.Equal(t, want, n, "%q", v)
		}
	})
}

// TestIdempotent: the methods of RFC 9110 section 9.2.2, and an
// idempotency key under either name, even with a nil value.
func TestIdempotent(t *testing.T) {
	for method, want := range map[string]bool{
		"": true, "GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true, "PUT": true, "DELETE": true,
		"POST": false, "PATCH": false, "CONNECT": false, "PURGE": false, "get": false, "put": false,
	} {
		assert.Equal(t, want, idempotent(&http.Request{Method: method}), "%q", method)
	}
	for _, h := range []http.Header{{"Idempotency-Key": {"k"}}, {"X-Idempotency-Key": {"k"}}, {"Idempotency-Key": nil}, {"Idempotency-Key": {""}}} {
		assert.True(t, idempotent(&http.Request{Method: http.MethodPost, Header: h}), "%v", h)
	}
	assert.False(t, idempotent(&http.Request{Method: http.MethodPost, Header: http.Header{"Idempotency": {"k"}}}))
}

func TestBackoff(t *testing.T) {
	base, maxWait := 100*time.Millisecond, 2*time.Second
	for attempt := range 70 {
		for range 20 {
			d := backoff(base, attempt, maxWait)
			require.GreaterOrEqual(t, d, base, "attempt %d", attempt)
			require.LessOrEqual(t, d, maxWait, "attempt %d", attempt)
			if attempt == 0 {
				require.Less(t, d, 2*base)
			}
		}
	}
	assert.Equal(t, time.Second, backoff(time.Second, 3, time.Second))
	assert.LessOrEqual(t, backoff(time.Millisecond, 62, time.Duration(1<<63-1)), time.Duration(1<<63-1))
}

func TestPacerBounded(t *testing.T) {
	p := newPacer(2)
	h := http.Header{"Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"5"}}
	for _, host := range []string{"a", "b", "c", "d"} {
		p.observe(host, h, t0)
	}
	assert.Len(t, p.until, 2)
	assert.Equal(t, 5*time.Second, p.delay("d", t0))
	assert.Equal(t, time.Second, p.delay("d", t0.Add(4*time.Second)))
	assert.Zero(t, p.delay("d", t0.Add(5*time.Second)), "expired")
	assert.Len(t, p.until, 1, "an expired host is forgotten")

	p.observe("c", http.Header{"Ratelimit-Remaining": {"3"}, "Ratelimit-Reset": {"5"}}, t0)
	assert.Zero(t, p.delay("c", t0), "quota left releases the host")
	p.observe("e", http.Header{"Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"x"}}, t0)
	assert.Zero(t, p.delay("e", t0), "a malformed field holds nothing")
}

// FuzzRetryWait feeds any rate-limit fields to the wait computation: it
// never panics, and a wait it accepts is within [backoff, max wait] and the
// total budget.
func FuzzRetryWait(f *testing.F) {
	for _, seed := range [][4]string{
		{"1", "", "", ""},
		{"-1", "", "", ""},
		{"0", "0", "0", ""},
		{"99999999999999999999", "", "", ""},
		{"Fri, 31 Dec 9999 23:59:59 GMT", "", "", ""},
		{"Mon, 01 Jan 1990 00:00:00 GMT", "", "", ""},
		{"", "5", "", ""},
		{"", "999999999999999", "", ""},
		{"", "", "1796230806", ""},
		{"", "", "9223372036854775807", ""},
		{"", "", "", `"api";r=0;t=3`},
		{"", "", "", `"api";r=0;t=NaN`},
		{"", "", "", `"api";r=-1;t=-1`},
		{"1e9", "NaN", "-0", `"a";t=99999999999999999`},
		{"9300000000", "9300000000", "", ""},
		{"000000000000000000000000000001", "", strings.Repeat("9", 30), ""},
		{"+5", "-5", "", `"a";r=0;t=9300000000`},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], 2)
	}
	f.Fuzz(func(t *testing.T, retryAfter, reset, xReset, structured string, attempt int) {
		h := http.Header{}
		for k, v := range map[string]string{"Retry-After": retryAfter, "Ratelimit-Reset": reset, "X-Ratelimit-Reset": xReset, "Ratelimit": structured} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		tr, err := New(nil, WithMaxWait(2*time.Second), WithMaxTotalWait(3*time.Second), WithBackoff(50*time.Millisecond))
		require.NoError(t, err)
		tr.now = func() time.Time { return t0 }
		attempt = max(attempt, 0) % 100
		d, ok := tr.retryWait(h, attempt, time.Second)
		if !ok {
			assert.Zero(t, d)
			return
		}
		assert.GreaterOrEqual(t, d, 50*time.Millisecond)
		assert.LessOrEqual(t, d, 2*time.Second)
		p := newPacer(4)
		p.observe("h", h, t0)
		assert.GreaterOrEqual(t, p.delay("h", t0), time.Duration(0))
	})
}

// observeByParse is what pacer.observe must do, by headers.Parse alone:
// hold the host until the reset when Remaining is 0, release it when quota
// is left, change nothing when the fields cannot be read.
func observeByParse(held bool, h http.Header, now time.Time) (holdFor time.Duration, heldAfter bool) {
	if h.Get("X-RateLimit-Remaining") == "" && h.Get("RateLimit-Remaining") == "" && h.Get("RateLimit") == "" {
		if held {
			return 5 * time.Second, true
		}
		return 0, false
	}
	layers, err := headers.Parse(h)
	switch {
	case err != nil && held:
		return 5 * time.Second, true
	case err != nil || len(layers) == 0:
		return 0, false
	case layers[0].Remaining != 0:
		return 0, false
	}
	if d, told := serverWait(h, now); told {
		return d, true
	}
	return 0, false
}

// checkObserve compares pacer.observe with observeByParse for h, with the
// host held (5 s) before and not.
func checkObserve(t *testing.T, h http.Header) {
	t.Helper()
	for _, held := range []bool{false, true} {
		p := newPacer(4)
		if held {
			p.until["h"] = t0.Add(5 * time.Second)
		}
		p.observe("h", h, t0)
		want, _ := observeByParse(held, h, t0)
		assert.Equal(t, want, p.delay("h", t0), "held before: %v, fields %v", held, h)
	}
}

// TestPacerObserve: the pacer's shortcut for responses that leave quota
// decides as a full parse of the fields would.
func TestPacerObserve(t *testing.T) {
	for _, h := range []http.Header{
		{},
		{"Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"3"}},
		{"Ratelimit-Remaining": {"00"}, "Ratelimit-Reset": {"3"}},
		{"Ratelimit-Remaining": {" 0\t"}, "Ratelimit-Reset": {"3"}},
		{"Ratelimit-Remaining": {"2"}, "Ratelimit-Reset": {"3"}},
		{"Ratelimit-Remaining": {"10"}, "Ratelimit-Reset": {"3"}},
		{"Ratelimit-Remaining": {""}, "Ratelimit-Reset": {"3"}},
		{"Ratelimit-Remaining": {"x"}, "Ratelimit-Reset": {"3"}},
		{"Ratelimit-Remaining": {"0", "0"}, "Ratelimit-Reset": {"3"}},
		{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {strconv.FormatInt(t0.Unix()+4, 10)}},
		{"X-Ratelimit-Remaining": {"0"}, "Ratelimit-Remaining": {"3"}, "Ratelimit-Reset": {"3"}},
		{"X-Ratelimit-Remaining": {"3"}, "Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"3"}},
		{"Ratelimit": {`"api";r=0;t=7`}},
		{"Ratelimit": {`"api";r=00;t=7`}},
		{"Ratelimit": {`"api";r=-0;t=7`}},
		{"Ratelimit": {`"api";r=5;t=7`}},
		{"Ratelimit": {`"api";r=10;t=7`}},
		{"Ratelimit": {`"api";t=7;r=0`}},
		{"Ratelimit": {`"api";r=-1;t=7`}},
		{"Ratelimit": {`"api";r=0;t=7`}, "Ratelimit-Remaining": {"4"}, "Ratelimit-Reset": {"3"}},
		{"Ratelimit": {`"api";r=4;t=7`}, "Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"3"}},
		{"Ratelimit": {`"api";r=4;t=7`, `"day";r=0;t=9`}},
		{"Ratelimit-Remaining": {"0"}, "Retry-After": {"2"}},
		{"Ratelimit-Remaining": {"0"}},
	} {
		checkObserve(t, h)
	}
}

// FuzzPacerObserve checks the shortcut against a full parse for any
// fields.
func FuzzPacerObserve(f *testing.F) {
	for _, seed := range [][3]string{
		{"0", "", ""}, {"00", "", ""}, {"", "0", ""}, {"5", "0", ""}, {"", "", `"a";r=0;t=3`},
		{"", "", `"a";r=-0;t=3`}, {"", "", `"a";r=7;t=3`}, {"1", "2", `"a";r=0`}, {" 0", "", ""},
	} {
		f.Add(seed[0], seed[1], seed[2], "3")
	}
	f.Fuzz(func(t *testing.T, x, draft6, structured, reset string) {
		h := http.Header{}
		for k, v := range map[string]string{"X-Ratelimit-Remaining": x, "Ratelimit-Remaining": draft6, "Ratelimit": structured, "Ratelimit-Reset": reset} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		checkObserve(t, h)
	})
}

// TestEpochSecondsAnyClock: an epoch too far ahead is maxDuration ahead
// whatever the clock says, a clock before 1970 included (no overflow into
// the past).
func TestEpochSecondsAnyClock(t *testing.T) {
	for _, now := range []time.Time{t0, time.Unix(-1<<40, 0), time.Unix(0, 0)} {
		d, told := epochSeconds("9223372036854775807", now)
		assert.True(t, told, "%v", now)
		assert.Equal(t, maxDuration, d, "%v", now)
	}
	d, told := epochSeconds(strconv.FormatInt(t0.Unix()+60, 10), t0)
	assert.True(t, told)
	assert.Equal(t, time.Minute, d)
}
