package probe

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/headers"
)

const ms = time.Millisecond

// admitted returns a 200 sent and received at the given times, saying
// Remaining rem of limit, whole again after reset.
func admitted(seq int, sent, received time.Duration, limit, rem int64, reset time.Duration) Result {
	return Result{Seq: seq, Sent: sent, Received: received, Status: http.StatusOK, Info: Info{
		Found: headers.Config{Draft6: true}, Limit: limit, Remaining: rem, ResetAfter: reset,
	}}
}

// denied returns a 429 with Retry-After 1s.
func denied(seq int, sent, received time.Duration, limit int64) Result {
	return Result{Seq: seq, Sent: sent, Received: received, Status: http.StatusTooManyRequests, Info: Info{
		Found: headers.Config{Draft6: true, RetryAfter: true}, Limit: limit, ResetAfter: time.Second, RetryAfter: time.Second,
	}}
}

func kinds(rep *Report) map[string]int {
	m := map[string]int{}
	for _, f := range rep.Disagreements {
		m[f.Kind] = f.Request
	}
	return m
}

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []Result
		want    map[string]int
	}{
		{
			name: "QuotaLie",
			results: []Result{
				admitted(1, 0, 10*ms, 5, 1, 10*time.Second),
				denied(2, 15*ms, 20*ms, 5),
			},
			want: map[string]int{KindQuotaLie: 2},
		},
		{
			// Request 2 was in flight when request 1's answer came: it may
			// have taken the last unit before request 3.
			name: "QuotaUsedByOverlap",
			results: []Result{
				admitted(1, 0, 10*ms, 5, 1, 10*time.Second),
				admitted(2, 5*ms, 20*ms, 5, 0, 10*time.Second),
				denied(3, 15*ms, 25*ms, 5),
			},
			want: map[string]int{},
		},
		{
			name: "RemainingStuck",
			results: []Result{
				admitted(1, 0, 10*ms, 10, 5, 60*time.Second),
				admitted(2, 20*ms, 30*ms, 10, 5, 60*time.Second),
				admitted(3, 40*ms, 50*ms, 10, 5, 60*time.Second),
			},
			want: map[string]int{KindRemainingStuck: 3},
		},
		{
			// A bucket of 5 refilled at 1 a second: Remaining 3 (3.99
			// tokens, say), whole in 2.01s (3s rounded up); 1.5s later
			// one and a half units came back, and request 2 took one.
			name: "RemainingRefilled",
			results: []Result{
				admitted(1, 0, 10*ms, 5, 3, 3*time.Second),
				admitted(2, 1500*ms, 1510*ms, 5, 4, 3*time.Second),
			},
			want: map[string]int{},
		},
		{
			// More back than the reset allows.
			name: "RemainingRefilledTooFast",
			results: []Result{
				admitted(1, 0, 10*ms, 5, 3, 3*time.Second),
				admitted(2, 500*ms, 510*ms, 5, 4, 3*time.Second),
			},
			want: map[string]int{KindRemainingStuck: 2},
		},
		{
			// A fixed window ends within the second the reset was rounded to.
			name: "RemainingAfterReset",
			results: []Result{
				admitted(1, 0, 10*ms, 5, 0, 2*time.Second),
				admitted(2, 1200*ms, 1210*ms, 5, 4, 60*time.Second),
			},
			want: map[string]int{},
		},
		{
			// Once the first window ended, request 2 is the new anchor.
			name: "RemainingStuckAfterReset",
			results: []Result{
				admitted(1, 0, 10*ms, 5, 0, 2*time.Second),
				admitted(2, 1500*ms, 1510*ms, 5, 4, 60*time.Second),
				admitted(3, 1600*ms, 1610*ms, 5, 4, 60*time.Second),
				admitted(4, 1700*ms, 1710*ms, 5, 4, 60*time.Second),
			},
			want: map[string]int{KindRemainingStuck: 4},
		},
		{
			// The server may have seen request 2 before request 1.
			name: "RemainingInFlightTogether",
			results: []Result{
				admitted(1, 0, 10*ms, 5, 3, 60*time.Second),
				admitted(2, 5*ms, 12*ms, 5, 4, 60*time.Second),
			},
			want: map[string]int{},
		},
		{
			name: "FieldsMissingAndMalformed",
			results: []Result{
				{Seq: 1, Sent: 0, Received: ms, Status: http.StatusOK, ParseErr: "bad"},
				{Seq: 2, Sent: 2 * ms, Received: 3 * ms, Status: http.StatusTooManyRequests},
				{Seq: 3, Sent: 4 * ms, Received: 5 * ms, Err: "refused"},
			},
			want: map[string]int{KindMalformed: 1, KindNoRetryInfo: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := newReport(Config{}, tc.results)
			assert.Equal(t, tc.want, kinds(rep), "%+v", rep.Disagreements)
		})
	}
}

func TestLatencyAndFirstDenied(t *testing.T) {
	var rs []Result
	for i := 1; i <= 100; i++ {
		r := admitted(i, time.Duration(i)*10*ms, time.Duration(i)*10*ms+time.Duration(101-i)*ms, 0, 0, 0)
		if i > 40 {
			r.Status = http.StatusTooManyRequests
		}
		rs = append(rs, r)
	}
	rep := newReport(Config{}, rs)
	assert.Equal(t, Latency{P50: Duration(50 * ms), P90: Duration(90 * ms), P99: Duration(99 * ms), Max: Duration(100 * ms)}, rep.Latency)
	require.NotNil(t, rep.FirstDenied)
	assert.Equal(t, FirstDenied{Request: 41, Elapsed: Duration(410 * ms)}, *rep.FirstDenied)
	assert.Equal(t, map[int]int{200: 40, 429: 60}, rep.Statuses)
}

func TestTotal(t *testing.T) {
	assert.Equal(t, 10, Config{Rate: 10, Duration: time.Second}.Total())
	assert.Equal(t, 5, Config{Rate: 10, Requests: 5, Duration: time.Second}.Total())
	assert.Equal(t, 7, Config{Rate: 10, Requests: 7}.Total())
}

// TestProgress checks that a run longer than a second reports progress.
func TestProgress(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	var mu sync.Mutex
	var seen []Progress
	rep, err := Run(context.Background(), Config{
		URL: srv.URL, Rate: 10, Requests: 13,
		Progress: func(p Progress) { mu.Lock(); seen = append(seen, p); mu.Unlock() },
	})
	require.NoError(t, err)
	assert.Equal(t, 13, rep.Requests)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, seen)
	assert.Equal(t, 13, seen[0].Total)
	assert.Positive(t, seen[0].Done)
	assert.GreaterOrEqual(t, seen[0].Elapsed, time.Second)
}
