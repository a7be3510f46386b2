package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/keyfuncs"
)

// cancelAt is a request context that cancels itself on the n-th time the
// flow (or the Limiter) looks at it, through Done or Err: a client that
// leaves at an arbitrary point of the flow. n = 0 never cancels.
type cancelAt struct {
	context.Context
	cancel context.CancelFunc
	n      int64
	calls  atomic.Int64
}

func newCancelAt(n int64) *cancelAt {
	ctx, cancel := context.WithCancel(context.Background())
	return &cancelAt{Context: ctx, cancel: cancel, n: n}
}

func (c *cancelAt) look() {
	if c.calls.Add(1) == c.n {
		c.cancel()
	}
}

func (c *cancelAt) Done() <-chan struct{} { c.look(); return c.Context.Done() }
func (c *cancelAt) Err() error            { c.look(); return c.Context.Err() }

// ended reports, without counting as a look, whether the context ended.
func (c *cancelAt) ended() bool { return c.Context.Err() != nil }

// fuzzFlow builds a Flow from the fuzzer's mode bits:
//
//	bits 0-2  key: IP (0), IP behind trusted proxies (1), the same reading
//	          Forwarded (2), API key header (3), the fuzzed key (4-7)
//	bit  3    weigh requests by the fuzzed cost
//	bits 4-5  store: memory (0), memory with a deny cache (1), a failing
//	          store failing closed (2), a failing store with a memory
//	          fallback (3)
//	bits 6-7  headers: default (0, 1), every family (2), none (3)
//	bits 8-10 algorithm
type fuzzFlow struct {
	flow    *httplimit.Flow
	cur     *cancelAt // the request in flight
	leaveAt string    // where its client leaves: "key", "cost", "store", "decided"
	keys    []string  // the key of each request, "" when none
	errs    []error
	closers []func()
}

const fuzzLimit = 3

var fuzzAlgorithms = []core.Algorithm{core.FixedWindow, core.SlidingWindowLog, core.SlidingWindowCounter, core.TokenBucket, core.LeakyBucket}

func newFuzzFlow(t *testing.T, mode uint16, key string, cost int64) *fuzzFlow {
	ff := &fuzzFlow{}
	mem := func() core.Store {
		s, err := memstore.New()
		if err != nil {
			t.Fatal(err)
		}
		ff.closers = append(ff.closers, func() { _ = s.Close() })
		return leavingStore{s, ff}
	}
	p := core.Policy{Name: "fuzz", Algorithm: fuzzAlgorithms[int(mode>>8&7)%len(fuzzAlgorithms)], Limit: fuzzLimit, Window: time.Hour}
	var lopts []core.Option
	var store core.Store
	switch mode >> 4 & 3 {
	case 0:
		store = mem()
	case 1:
		store = mem()
		lopts = append(lopts, core.WithDenyCache(16))
	case 2:
		store = failing{}
		p.FailClosed = time.Second
	case 3:
		store = failing{}
		lopts = append(lopts, core.WithFallback(mem()))
	}
	var err error
	var kf keyfuncs.Func
	proxies := keyfuncs.TrustedProxies("10.0.0.0/8", "fd00::/8", "127.0.0.1/32")
	switch m := mode & 7; {
	case m == 0:
		kf = clientIPKey(t)
	case m == 1:
		kf = clientIPKey(t, proxies)
	case m == 2:
		kf = clientIPKey(t, proxies, keyfuncs.UseForwarded())
	case m == 3:
		kf, err = keyfuncs.APIKeyHeader("X-Api-Key", nil)
	default:
		kf = func(keyfuncs.Request) (string, error) {
			if strings.HasPrefix(key, "PANIC") {
				panic("fuzz key function: " + key)
			}
			return key, nil
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	record := func(r keyfuncs.Request) (string, error) {
		ff.leave("key")
		k, err := kf(r)
		if err != nil {
			k = ""
		}
		ff.keys = append(ff.keys, k)
		return k, err
	}
	ly := httplimit.Layer{Policy: p, Key: record}
	opts := []httplimit.Option{
		httplimit.WithCore(lopts...),
		httplimit.WithMaxDelay(time.Millisecond),
		httplimit.WithErrorHandler(func(_ keyfuncs.Request, err error) { ff.errs = append(ff.errs, err) }),
	}
	if mode&8 != 0 {
		ly.Cost = func(keyfuncs.Request) int64 { ff.leave("cost"); return cost }
	}
	switch mode >> 6 & 3 {
	case 2:
		opts = append(opts, httplimit.WithHeaders(headers.Config{XRateLimit: true, Draft6: true, Structured: true, RetryAfter: true}))
	case 3:
		opts = append(opts, httplimit.WithHeaders(headers.Config{}))
	}
	ff.flow, err = httplimit.New(store, []httplimit.Layer{ly}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ff
}

// leave ends the request in flight when its client leaves at point.
func (ff *fuzzFlow) leave(point string) {
	if ff.leaveAt == point {
		ff.cur.cancel()
	}
}

// leavingStore is a memory store where the client of the request in
// flight may leave as the store decides, or just after. It decides at t0.
type leavingStore struct {
	*memstore.Store
	ff *fuzzFlow
}

func (s leavingStore) Take(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	s.ff.leave("store")
	defer s.ff.leave("decided")
	if now.IsZero() {
		now = t0
	}
	return s.Store.Take(ctx, now, reqs, out)
}

// leavePoints are where a client may leave, besides at a look at its
// context (cancelAt).
var leavePoints = []string{"key", "cost", "store", "decided"}

func (ff *fuzzFlow) close() {
	for _, c := range ff.closers {
		c()
	}
}

// The only bodies the default handlers write.
var fuzzBodies = regexp.MustCompile(`^(` +
	`\{"error":"rate_limit_exceeded","message":"Too many requests, retry after [1-9][0-9]* seconds?\.","retry_after_seconds":[1-9][0-9]*\}` +
	`|\{"error":"rate_limit_unavailable","message":"Rate limiting is temporarily unavailable, retry after [1-9][0-9]* seconds?\.","retry_after_seconds":[1-9][0-9]*\}` +
	`|` + regexp.QuoteMeta(`{"error":"rate_limit_key_missing","message":"The request does not identify its client."}`) +
	`|` + regexp.QuoteMeta(internalBody) +
	`|` + regexp.QuoteMeta(canceledBody) + `)$`)

// fuzzHeaderValue is every value the flow may write: numbers, and the
// structured fields' "fuzz";r=N;t=N and "fuzz";q=N;w=N.
var fuzzHeaderValue = regexp.MustCompile(`^([0-9]+|"fuzz";[rq]=[0-9]+;[tw]=[0-9]+)$`)

// digits matches runs of digits, which the echo check folds to one "0".
var digits = regexp.MustCompile(`[0-9]+`)

// fuzzKnown is all the text the flow writes, digits folded: a request
// value found in it is not an echo.
var fuzzKnown = digits.ReplaceAllString(strings.Join([]string{
	`{"error":"rate_limit_exceeded","message":"Too many requests, retry after 1 second.","retry_after_seconds":1}`,
	`{"error":"rate_limit_exceeded","message":"Too many requests, retry after 2 seconds.","retry_after_seconds":2}`,
	`{"error":"rate_limit_unavailable","message":"Rate limiting is temporarily unavailable, retry after 1 second.","retry_after_seconds":1}`,
	`{"error":"rate_limit_unavailable","message":"Rate limiting is temporarily unavailable, retry after 2 seconds.","retry_after_seconds":2}`,
	`{"error":"rate_limit_key_missing","message":"The request does not identify its client."}`,
	internalBody, canceledBody,
	`X-Ratelimit-Limit: 3`, `X-Ratelimit-Remaining: 3`, `X-Ratelimit-Reset: 3`,
	`Ratelimit-Limit: 3`, `Ratelimit-Remaining: 3`, `Ratelimit-Reset: 3`,
	`Ratelimit: "fuzz";r=3;t=3`, `Ratelimit-Policy: "fuzz";q=3;w=3`, `Retry-After: 3`,
}, "\n"), "0")

var fuzzHeaderNames = map[string]bool{
	"X-Ratelimit-Limit": true, "X-Ratelimit-Remaining": true, "X-Ratelimit-Reset": true,
	"Ratelimit-Limit": true, "Ratelimit-Remaining": true, "Ratelimit-Reset": true,
	"Ratelimit": true, "Ratelimit-Policy": true, "Retry-After": true,
}

// FuzzFlow sends hostile requests through Flows of every configuration:
// forged and malformed forwarding headers, odd peers, random keys and
// costs, and clients that leave at any point. It checks that the flow
// never panics, never lets a request whose client left proceed, never
// admits more than the limit for one key (nor gives a client a key of its
// choosing when no proxy is trusted), answers only with the documented
// statuses and bodies, and echoes nothing of the request.
func FuzzFlow(f *testing.F) {
	giant := strings.Repeat("A", 64<<10)
	for _, s := range []struct {
		peer, name, value, xff, fwd, key string
		cost                             int64
		mode                             uint16
		cancel                           uint8
		n                                uint8
	}{
		{"192.0.2.1:1234", "X-Api-Key", "secret-key-1", "", "", "", 1, 0, 0, 5},
		{"10.0.0.1:1", "X-Real-Ip", "6.6.6.6", "6.6.6.6, 198.51.100.1", "", "", 1, 1, 0, 6},
		{"10.0.0.1:1", "Forwarded", "for=6.6.6.6", "198.51.100.1", `for="[2001:db8::1]:4711", for=10.0.0.2`, "", 2, 2 | 8, 0, 4},
		{"[fe80::1%eth0]:1", "X-Forwarded-For", "::ffff:1.2.3.4", "fe80::1%eth0, ,,", `for="\[::1\]"`, "", 1, 1 | 1<<6, 3, 5},
		{"[::ffff:10.0.0.1]:1", "X-Forwarded-For", "unknown", "::ffff:198.51.100.1, unknown", `For="_hidden";proto=http`, "", 1, 2 | 2<<6, 5, 5},
		{"nonsense", "Cf-Connecting-Ip", "1.1.1.1", "1.1.1.1", "for=1.1.1.1", "", 1, 1, 0, 3},
		{"", "X", "\x00\r\n\x7f", "\x00", "\r\n", "", 1, 0, 1, 2},
		{"192.0.2.1:1", "X-Api-Key", giant, giant, giant, giant, 1, 3, 0, 4},
		{"192.0.2.1:1", "X-Api-Key", "k", "", "", "client-key-{with}-braces\x01", 3, 4 | 8, 0, 4},
		{"192.0.2.1:1", "X-Api-Key", "k", "", "", "", 1, 4, 0, 2},
		{"192.0.2.1:1", "X-Api-Key", "k", "", "", "PANIC in the key", 1, 5, 0, 2},
		{"192.0.2.1:1", "X-Api-Key", "k", "", "", "k", -1, 6 | 8, 0, 2},
		{"192.0.2.1:1", "X-Api-Key", "k", "", "", "k", 1 << 62, 7 | 8, 0, 2},
		{"192.0.2.1:1", "", "", "", "", "", 1, 1 << 4, 2, 6},
		{"192.0.2.1:1", "", "", "", "", "", 1, 2 << 4, 1, 3},
		{"192.0.2.1:1", "", "", "", "", "", 1, 3 << 4, 4, 5},
		{"192.0.2.1:1", "", "", "", "", "", 1, 4 << 8, 6, 6},
		{"192.0.2.1:1", "", "", "", "", "", 1, 4<<8 | 3<<4, 9, 6},
		{"192.0.2.1:1", "", "", "", "", "", 1, 0, 8, 2},
		{"192.0.2.1:1", "", "", "", "", "", 1, 8, 8 | 1<<4, 2},
		{"192.0.2.1:1", "", "", "", "", "", 1, 0, 8 | 2<<4, 2},
		{"192.0.2.1:1", "", "", "", "", "", 1, 0, 8 | 3<<4, 2},
		{"192.0.2.1:1", "", "", "", "", "", 1, 1 << 4, 8 | 3<<4, 4},
		{"192.0.2.1:1", "", "", "", "", "", 1, 3 << 4, 8 | 3<<4, 4},
		{"192.0.2.1:1", "", "", "", "", "", 1, 4 << 8, 8 | 3<<4, 4},
		{"[2001:db8:1:100::1]:1", "X-Forwarded-For", "2001:db8:1:100::2", "2001:db8:1:1ff::1", "", "", 1, 2 << 8, 0, 5},
	} {
		f.Add(s.peer, s.name, s.value, s.xff, s.fwd, s.key, s.cost, s.mode, s.cancel, s.n)
	}
	f.Fuzz(func(t *testing.T, peer, name, value, xff, fwd, key string, cost int64, mode uint16, cancel, n uint8) {
		ff := newFuzzFlow(t, mode, key, cost)
		defer ff.close()
		trusted := mode&7 == 1 || mode&7 == 2
		storeFails := mode>>4&3 >= 2
		canPanic := mode&7 >= 4 && strings.HasPrefix(key, "PANIC")

		header := http.Header{}
		if name != "" {
			header[http.CanonicalHeaderKey(name)] = []string{value}
		}
		admitted := map[string]int64{} // cost admitted per key
		requests := int(n%8) + 1
		for i := range requests {
			h := header.Clone()
			// Each request forges another leftmost X-Forwarded-For entry.
			h["X-Forwarded-For"] = append([]string{fmt.Sprintf("203.0.113.%d", i)}, xff)
			if fwd != "" {
				h["Forwarded"] = []string{fwd}
			}
			ctx := newCancelAt(int64(cancel % 8))
			ff.cur, ff.leaveAt = ctx, ""
			if cancel&8 != 0 {
				ctx.n = 0
				ff.leaveAt = leavePoints[int(cancel>>4)%len(leavePoints)]
			}
			r := &request{remote: peer, header: h, ctx: ctx}
			w := newResponse()
			errsBefore := len(ff.errs)
			proceed := handle(ff.flow, r, w)
			left := ctx.ended() // the client left during the flow
			ctx.cancel()

			if proceed {
				if left {
					t.Fatalf("request %d proceeds although its client left (at look %d)", i, ctx.n)
				}
				if w.writes != 0 {
					t.Fatalf("request %d proceeds after a response was written: %d %q", i, w.status, w.body)
				}
				c := int64(1)
				if mode&8 != 0 {
					c = cost
				}
				k := ff.keys[len(ff.keys)-1]
				admitted[k] += c
				if !storeFails || mode>>4&3 == 3 {
					if admitted[k] > fuzzLimit {
						t.Fatalf("key %q admitted %d over a limit of %d", k, admitted[k], fuzzLimit)
					}
				} else {
					t.Fatalf("request %d proceeds although the store failed closed", i)
				}
			} else {
				if w.writes != 1 {
					t.Fatalf("request %d: %d writes, want 1", i, w.writes)
				}
				switch w.status {
				case 429, 400, 500, 499:
				case 503:
					if !storeFails {
						t.Fatalf("request %d: 503 from a working store", i)
					}
				default:
					t.Fatalf("request %d: status %d", i, w.status)
				}
				if !fuzzBodies.MatchString(w.body) {
					t.Fatalf("request %d: body %q", i, w.body)
				}
				if w.status == 499 && !left {
					t.Fatalf("request %d: 499 although the client is there", i)
				}
			}
			for k, vs := range w.header {
				if k == "Content-Type" {
					continue
				}
				if !fuzzHeaderNames[k] || len(vs) != 1 || !fuzzHeaderValue.MatchString(vs[0]) {
					t.Fatalf("request %d: header %s: %q", i, k, vs)
				}
			}
			for _, err := range ff.errs[errsBefore:] {
				switch {
				case errors.As(err, new(*httplimit.PanicError)):
					if !canPanic {
						t.Fatalf("request %d: unexpected panic: %v\n%s", i, err, err.(*httplimit.PanicError).Stack)
					}
				case errors.Is(err, context.Canceled):
					if !left {
						t.Fatalf("request %d: canceled while the client is there: %v", i, err)
					}
				case errors.Is(err, limits.ErrStore):
					if !storeFails {
						t.Fatalf("request %d: store error from a working store: %v", i, err)
					}
				case errors.Is(err, keyfuncs.ErrNoKey), errors.Is(err, core.ErrInvalidOption),
					errors.Is(err, core.ErrInvalidOption), errors.Is(err, core.ErrInvalidOption):
				default:
					t.Fatalf("request %d: unexpected error %v", i, err)
				}
			}
			for _, e := range []string{value, xff, fwd, key, peer} {
				e = digits.ReplaceAllString(e, "0")
				if len(e) < 4 || strings.Contains(fuzzKnown, e) {
					continue // what the flow writes anyway
				}
				for k, vs := range w.header {
					for _, v := range vs {
						if strings.Contains(digits.ReplaceAllString(k+": "+v, "0"), e) {
							t.Fatalf("request %d: header %s: %q echoes %q", i, k, v, e)
						}
					}
				}
				if strings.Contains(digits.ReplaceAllString(w.body, "0"), e) {
					t.Fatalf("request %d: body %q echoes %q", i, w.body, e)
				}
			}
		}
		// Without trusted proxies, the client is the socket peer whatever
		// it forges: every request that got a key got the same one.
		if !trusted && mode&7 == 0 {
			var first string
			for _, k := range ff.keys {
				if k == "" {
					continue
				}
				if first == "" {
					first = k
				} else if k != first {
					t.Fatalf("keys %q and %q for one peer without trusted proxies", first, k)
				}
			}
		}
	})
}
