package headers

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// TestParseRoundTrip checks that Parse reads back what a Writer writes, for
// every combination of families.
func TestParseRoundTrip(t *testing.T) {
	decisions := []core.Decision{
		allowedDecision,
		deniedDecision,
		{Allowed: true, Limit: 100, Remaining: 100, Policy: apiPolicy},
		{Allowed: true, Limit: limits.MaxLimit, Remaining: limits.MaxLimit - 1, ResetAfter: limits.MaxWindow,
			Policy: core.Policy{Name: "huge", Algorithm: core.TokenBucket, Limit: limits.MaxLimit, Window: limits.MaxWindow}},
		{Limit: 20, ResetAfter: 2500 * time.Millisecond, RetryAfter: 250 * time.Millisecond,
			Policy: core.Policy{Name: "Tb_1.x-y", Algorithm: core.LeakyBucket, Limit: 10, Window: time.Second, Burst: 20}},
		{Allowed: true, Limit: 1, Remaining: 1, Policy: core.Policy{Name: `a"b\c`, Limit: 1, Window: time.Second}},
	}
	for mask := range 16 {
		cfg := Config{XRateLimit: mask&1 != 0, Draft6: mask&2 != 0, Structured: mask&4 != 0, RetryAfter: mask&8 != 0}
		for _, d := range decisions {
			h := http.Header{}
			NewWriter(cfg).Write(h, d, nil, t0)
			h.Set("Date", t0.UTC().Format(http.TimeFormat))
			got, err := parseFirst(h)
			require.NoError(t, err, "%+v: parseLayers(%v)", cfg, h)
			want := fields{Found: cfg}
			want.Found.RetryAfter = cfg.RetryAfter && !d.Allowed
			if cfg.XRateLimit || cfg.Draft6 {
				want.Limit = d.Limit
			}
			if cfg.XRateLimit || cfg.Draft6 || cfg.Structured {
				want.Remaining = d.Remaining
			}
			if cfg.Draft6 || cfg.Structured {
				want.ResetAfter = time.Duration(ceilSeconds(d.ResetAfter)) * time.Second
			} else if cfg.XRateLimit {
				// X-RateLimit-Reset's epoch, as a delay from Date.
				want.ResetAfter = time.Unix(ceilUnix(t0.Add(d.ResetAfter)), 0).Sub(t0.Truncate(time.Second))
			}
			if want.Found.RetryAfter {
				want.RetryAfter = time.Duration(limits.RetryAfterSeconds(d.Allowed, d.RetryAfter)) * time.Second
			}
			if cfg.Structured {
				want.Policy = d.Policy.Name
				want.Quota = d.Policy.Limit
				want.Window = time.Duration(max(ceilSeconds(d.Policy.Window), 1)) * time.Second
			}
			assert.Equal(t, want, got, "%+v: parseLayers(Write(%+v))", cfg, d)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		want fields
	}{{
		name: "nothing",
		h:    http.Header{"Content-Type": {"text/plain"}},
		want: fields{},
	}, {
		name: "names are case-insensitive, values trimmed",
		h:    hdr("x-ratelimit-limit", " 10 ", "X-RATELIMIT-REMAINING", "\t7"),
		want: fields{Found: Config{XRateLimit: true}, Limit: 10, Remaining: 7},
	}, {
		name: "Draft6 wins over XRateLimit",
		h:    hdr(canonXRateLimitLimit, "10", canonXRateLimitRemaining, "7", canonRateLimitLimit, "20", canonRateLimitRemaining, "8"),
		want: fields{Found: Config{XRateLimit: true, Draft6: true}, Limit: 20, Remaining: 8},
	}, {
		name: "Retry-After as an HTTP-date in the past",
		h:    hdr(canonRetryAfter, "Wed, 21 Oct 2015 07:28:00 GMT"),
		want: fields{Found: Config{RetryAfter: true}},
	}, {
		name: "Retry-After as an HTTP-date: its delay from Date",
		h:    hdr(canonRetryAfter, "Wed, 21 Oct 2015 07:28:00 GMT", "Date", "Wed, 21 Oct 2015 07:26:30 GMT"),
		want: fields{Found: Config{RetryAfter: true}, RetryAfter: 90 * time.Second},
	}, {
		name: "Retry-After 0",
		h:    hdr(canonRetryAfter, "0"),
		want: fields{Found: Config{RetryAfter: true}},
	}, {
		name: "several policies: the one RateLimit names",
		h: hdr(canonRateLimit, `"daily";r=5;t=100`,
			canonRateLimitPolicy, `"burst";q=10;w=1, "daily";q=1000;w=86400`),
		want: fields{Found: Config{Structured: true}, Remaining: 5, ResetAfter: 100 * time.Second,
			Policy: "daily", Quota: 1000, Window: 24 * time.Hour},
	}, {
		name: "list split over several lines, first RateLimit item reported",
		h: http.Header{canonRateLimit: {`"a";r=1`, `"b";r=2;t=3`},
			canonRateLimitPolicy: {`"b";q=5;w=6`, `"a";q=7;w=8`}},
		want: fields{Found: Config{Structured: true}, Remaining: 1, Policy: "a", Quota: 7, Window: 8 * time.Second},
	}, {
		name: "no policy named like the RateLimit item",
		h:    hdr(canonRateLimit, `"a";r=1;t=2`, canonRateLimitPolicy, `"b";q=5;w=6`),
		want: fields{Found: Config{Structured: true}, Remaining: 1, ResetAfter: 2 * time.Second, Policy: "a"},
	}, {
		name: "RateLimit-Policy alone: its first item",
		h:    hdr(canonRateLimitPolicy, `"b";q=5;w=6, "a";q=7`),
		want: fields{Found: Config{Structured: true}, Policy: "b", Quota: 5, Window: 6 * time.Second},
	}, {
		name: "tokens, unknown parameters of every type, repeated parameter",
		h: hdr(canonRateLimit, `day;r=1;r=2;x;y=?0;z=-1.5;u=@123;v=%"caf%c3%a9";pk=:AAE=:`,
			canonRateLimitPolicy, `day;q=10;w=60;qu="requests";pk=:AAE=:;x=tok/en:1`),
		want: fields{Found: Config{Structured: true}, Remaining: 2, Policy: "day", Quota: 10, Window: time.Minute},
	}, {
		name: "escaped name",
		h:    hdr(canonRateLimit, `"a\"b\\c";r=1`),
		want: fields{Found: Config{Structured: true}, Remaining: 1, Policy: `a"b\c`},
	}, {
		name: "drafts 03 to 07 RateLimit-Policy, as express-rate-limit writes it",
		h:    hdr(canonRateLimitLimit, "100", canonRateLimitRemaining, "99", canonRateLimitReset, "60", canonRateLimitPolicy, "100;w=60"),
		want: fields{Found: Config{Draft6: true}, Limit: 100, Remaining: 99, ResetAfter: time.Minute, Quota: 100, Window: time.Minute},
	}, {
		name: "largest values",
		h: hdr(canonXRateLimitLimit, "999999999999999", canonXRateLimitReset, "999999999999999",
			canonRetryAfter, "9223372036", canonRateLimit, `"a";r=999999999999999;t=9223372036`),
		want: fields{Found: Config{XRateLimit: true, Structured: true, RetryAfter: true}, Limit: 999999999999999,
			Remaining: 999999999999999, RetryAfter: 9223372036 * time.Second,
			ResetAfter: 9223372036 * time.Second, Policy: "a"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFirst(tt.h)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseMalformed(t *testing.T) {
	bad := map[string][]string{
		canonXRateLimitLimit: {"", "-1", "+1", "abc", "1.5", "1e3", "0x10", "1 2", "99999999999999999999",
			"1000000000000000", "\uff11", "1\x00"},
		canonXRateLimitRemaining: {"-0", "NaN"},
		canonXRateLimitReset:     {"-1700000000", "soon", "17000000000000000"},
		canonRateLimitLimit:      {"1,2", "١"},
		canonRateLimitRemaining:  {"-5"},
		canonRateLimitReset:      {"-1", "1.5", "9223372037", "999999999999999"},
		canonRetryAfter:          {"", "-1", "soon", "1.5", "9223372037", "Wed, 21 Oct 2015 07:28:00", "1s"},
		canonRateLimit: {"", " ", `"a"`, `"a";t=1`, `"a";r=-1`, `"a";r=1.5`, `"a";r="1"`, `"a";r=?1`, `"a";r`,
			`"a";r=1;t=-2`, `"a";r=1;t=9223372037`, `"a";r=1234567890123456`, `limit=100, remaining=50, reset=30`,
			`"a;r=1`, `("a");r=1`, `"a";r=1,`, `"a";r=1,,"b";r=2`, `1;r=1`, "\"a\x01\";r=1", `"a\n";r=1`,
			`"a";r=1 "b"`, `"a";R=1`, `"a";r=1;=2`, `"a";r=1;x=`, `"a";r=1;x=:AA`, `"a";r=1;x=:A A:`,
			`"a";r=1;x=?2`, `"a";r=1;x=@1.5`, `"a";r=1;x=%"%C3%A9"`, `"a";r=1;x=%"%c3"`, `"a";r=1;x=%"a`,
			`"a";r=1;x=1.2345`, `"a";r=1;x=1.`, `"a";r=1;x=-`, `"a";r=1;x=1234567890123.5`, `"a\q";r=1`,
			`"a";r=1, "b";r=-1`, `"a";r=1;x=(1 2)`, `'a';r=1`},
		canonRateLimitPolicy: {"", `"a"`, `"a";w=60`, `"a";q=-5`, `-5;w=60`, `"a";q=1;w=-1`, `"a";q=x`,
			`"a";q=1.0`, `"a";q=1;w=9223372037`, `?1;w=1`, `"a";q=1, "b";w=1`, `100;w=60;w=-1`},
	}
	for name, values := range bad {
		for _, v := range values {
			h := http.Header{name: {v}}
			if name != canonRateLimit {
				h.Set(canonRateLimit, `"ok";r=1`) // a good field does not hide a bad one
			}
			info, err := parseFirst(h)
			if !assert.ErrorIs(t, err, ErrMalformed, "parseLayers(%s: %q) = %+v", name, v, info) {
				continue
			}
			assert.Zero(t, info, "parseLayers(%s: %q): fields returned with the error", name, v)
			assert.ErrorContains(t, err, name, "parseLayers(%s: %q): the error names the field", name, v)
		}
	}

	for _, name := range []string{canonXRateLimitLimit, canonXRateLimitReset, canonRateLimitReset, canonRetryAfter} {
		_, err := parseFirst(http.Header{name: {"1", "1"}})
		assert.ErrorIs(t, err, ErrMalformed, "%s repeated", name)
	}

	long := strings.Repeat("9", 1000)
	_, err := parseFirst(http.Header{canonRateLimitLimit: {long}})
	require.ErrorIs(t, err, ErrMalformed, "a 1000-digit value")
	assert.LessOrEqual(t, len(err.Error()), 200, "a 1000-digit value: error %q, want a short one", err)
}

// FuzzParse feeds Parse arbitrary values for the structured fields and for
// one of the others. It must never panic, and what it accepts must be sane.
func FuzzParse(f *testing.F) {
	others := []string{canonXRateLimitLimit, canonXRateLimitRemaining, canonXRateLimitReset,
		canonRateLimitLimit, canonRateLimitRemaining, canonRateLimitReset, canonRetryAfter}
	f.Add(`"api";r=42;t=2`, `"api";q=100;w=60`, uint8(0), "100")
	f.Add(`"api";r=0;t=30`, `"api";q=100;w=60`, uint8(6), "1")
	f.Add(`day;r=1;x;y=?0;z=-1.5;u=@123;v=%"caf%c3%a9";pk=:AAE=:`, `"b";q=5;w=6, day;q=7`, uint8(2), "1700000002")
	f.Add("", "100;w=60", uint8(5), "60")
	f.Add(`limit=100, remaining=50, reset=30`, "", uint8(6), "Wed, 21 Oct 2015 07:28:00 GMT")
	f.Add(`("a");r=1`, `"a";q=1;w=9223372037`, uint8(1), "-1")
	f.Add(`"a\"b\\c";r=1`, `"a";r=1,`, uint8(3), "99999999999999999999")
	f.Add(`"a";r=1;x=%"%c3"`, `"a";q=1.5`, uint8(4), "1.5")
	f.Fuzz(func(t *testing.T, rl, policy string, field uint8, value string) {
		h := http.Header{}
		if rl != "" {
			h.Set(canonRateLimit, rl)
		}
		if policy != "" {
			h.Set(canonRateLimitPolicy, policy)
		}
		h.Set(others[int(field)%len(others)], value)
		infos, err := parseLayers(h)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse error %v does not wrap ErrMalformed", err)
			}
			return
		}
		for _, info := range infos {
			if info.Limit < 0 || info.Remaining < 0 || info.Quota < 0 ||
				info.ResetAfter < 0 || info.RetryAfter < 0 || info.Window < 0 {
				t.Fatalf("Parse accepted a negative value: %+v", info)
			}
		}
	})
}

// hdr builds a header from name, value pairs.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// TestParseRetryAfterDate: a Retry-After HTTP-date without Date is read as
// its delay from the current time, rounded up to a whole second; an
// unreadable Date counts as none.
func TestParseRetryAfterDate(t *testing.T) {
	for _, date := range []string{"", "yesterday"} {
		at := time.Now().Add(90 * time.Second).UTC()
		h := hdr(canonRetryAfter, at.Format(http.TimeFormat))
		if date != "" {
			h.Set("Date", date)
		}
		info, err := parseFirst(h)
		require.NoError(t, err)
		assert.True(t, info.Found.RetryAfter)
		assert.GreaterOrEqual(t, info.RetryAfter, 89*time.Second, "Date %q", date)
		assert.LessOrEqual(t, info.RetryAfter, 90*time.Second, "Date %q", date)
		assert.Zero(t, info.RetryAfter%time.Second, "whole seconds")
	}
}

// TestParseXRateLimitReset: X-RateLimit-Reset, an epoch, is read as its
// delay from Date, or without a readable Date from the current time rounded
// up to a whole second; one in the past is no delay.
func TestParseXRateLimitReset(t *testing.T) {
	sent := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	h := hdr(canonXRateLimitReset, strconv.FormatInt(sent.Unix()+90, 10), "Date", sent.Format(http.TimeFormat))
	info, err := parseFirst(h)
	require.NoError(t, err)
	assert.Equal(t, fields{Found: Config{XRateLimit: true}, ResetAfter: 90 * time.Second}, info)

	h = hdr(canonXRateLimitReset, strconv.FormatInt(time.Now().Unix()+90, 10))
	info, err = parseFirst(h)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, info.ResetAfter, 89*time.Second)
	assert.LessOrEqual(t, info.ResetAfter, 90*time.Second)
	assert.Zero(t, info.ResetAfter%time.Second, "whole seconds")

	info, err = parseFirst(hdr(canonXRateLimitReset, "1700000000"))
	require.NoError(t, err)
	assert.Zero(t, info.ResetAfter, "a reset in the past")
}
