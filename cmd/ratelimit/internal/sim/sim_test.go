package sim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/cmd/ratelimit/internal/sim"
	"github.com/apigate/ratelimit/core"
)

const ms = time.Millisecond

type want struct {
	at      string // trace timestamp, seconds after sim.Epoch
	cost    int64
	allowed bool
	rem     int64
	reset   time.Duration
	retry   time.Duration
	delay   time.Duration
}

// The histories and decisions below are the hand-computed scripts of
// core/storetest (windows.go, buckets.go), by the same names. The suite's
// epoch (2030-01-01 UTC) is sim.Epoch, so windows align the same way.
var conformance = []struct {
	name   string
	policy core.Policy
	steps  []want
}{
	{"fixed_window/burst-then-deny", core.Policy{Algorithm: core.FixedWindow, Limit: 5, Window: time.Second}, []want{
		{"0", 1, true, 4, 1000 * ms, 0, 0},
		{"0.1", 1, true, 3, 900 * ms, 0, 0},
		{"0.2", 1, true, 2, 800 * ms, 0, 0},
		{"0.3", 1, true, 1, 700 * ms, 0, 0},
		{"0.4", 1, true, 0, 600 * ms, 0, 0},
		{"0.5", 1, false, 0, 500 * ms, 500 * ms, 0},
		{"0.5", 1, false, 0, 500 * ms, 500 * ms, 0},
		{"0.999", 1, false, 0, 1 * ms, 1 * ms, 0},
		{"0.9995", 1, false, 0, 1 * ms, 1 * ms, 0},
		{"1", 1, true, 4, 1000 * ms, 0, 0},
	}},
	{"fixed_window/window-edge-admits-2L", core.Policy{Algorithm: core.FixedWindow, Limit: 5, Window: time.Second}, []want{
		{"995ms", 1, true, 4, 5 * ms, 0, 0},
		{"996ms", 1, true, 3, 4 * ms, 0, 0},
		{"997ms", 1, true, 2, 3 * ms, 0, 0},
		{"998ms", 1, true, 1, 2 * ms, 0, 0},
		{"999ms", 1, true, 0, 1 * ms, 0, 0},
		{"999ms", 1, false, 0, 1 * ms, 1 * ms, 0},
		{"1000ms", 1, true, 4, 1000 * ms, 0, 0},
		{"1001ms", 1, true, 3, 999 * ms, 0, 0},
		{"1002ms", 1, true, 2, 998 * ms, 0, 0},
		{"1003ms", 1, true, 1, 997 * ms, 0, 0},
		{"1004ms", 1, true, 0, 996 * ms, 0, 0},
		{"1005ms", 1, false, 0, 995 * ms, 995 * ms, 0},
	}},
	{"sliding_window_log/window-edge-no-2L", core.Policy{Algorithm: core.SlidingWindowLog, Limit: 5, Window: time.Second}, []want{
		{"0.995", 1, true, 4, 1000 * ms, 0, 0},
		{"0.996", 1, true, 3, 1000 * ms, 0, 0},
		{"0.997", 1, true, 2, 1000 * ms, 0, 0},
		{"0.998", 1, true, 1, 1000 * ms, 0, 0},
		{"0.999", 1, true, 0, 1000 * ms, 0, 0},
		{"1.000", 1, false, 0, 999 * ms, 995 * ms, 0},
		{"1.5", 1, false, 0, 499 * ms, 495 * ms, 0},
		{"1.994", 1, false, 0, 5 * ms, 1 * ms, 0},
		{"1.995", 1, true, 0, 1000 * ms, 0, 0},
		{"1.995", 1, false, 0, 1000 * ms, 1 * ms, 0},
	}},
	{"sliding_window_counter/burst-then-deny", core.Policy{Algorithm: core.SlidingWindowCounter, Limit: 4, Window: time.Second}, []want{
		{"0", 1, true, 3, 2000 * ms, 0, 0},
		{"0.1", 1, true, 2, 1900 * ms, 0, 0},
		{"0.2", 1, true, 1, 1800 * ms, 0, 0},
		{"0.3", 1, true, 0, 1700 * ms, 0, 0},
		{"0.4", 1, false, 0, 1600 * ms, 850 * ms, 0},
		{"0.4", 1, false, 0, 1600 * ms, 850 * ms, 0},
		{"1.249", 1, false, 0, 751 * ms, 1 * ms, 0},
		{"1.25", 1, true, 0, 1750 * ms, 0, 0},
		{"1.25", 1, false, 0, 1750 * ms, 250 * ms, 0},
		{"1.5", 1, true, 0, 1500 * ms, 0, 0},
		{"1.7", 1, false, 0, 1300 * ms, 50 * ms, 0},
		{"1.75", 1, true, 0, 1250 * ms, 0, 0},
		{"5", 1, true, 3, 2000 * ms, 0, 0},
	}},
	{"token_bucket/burst-then-deny", core.Policy{Algorithm: core.TokenBucket, Limit: 5, Window: time.Second}, []want{
		{"0", 1, true, 4, 200 * ms, 0, 0},
		{"0", 1, true, 3, 400 * ms, 0, 0},
		{"0", 1, true, 2, 600 * ms, 0, 0},
		{"0", 1, true, 1, 800 * ms, 0, 0},
		{"0", 1, true, 0, 1000 * ms, 0, 0},
		{"0", 1, false, 0, 1000 * ms, 200 * ms, 0},
		{"0", 1, false, 0, 1000 * ms, 200 * ms, 0},
		{"0.1", 1, false, 0, 900 * ms, 100 * ms, 0},
		{"0.2", 1, true, 0, 1000 * ms, 0, 0},
		{"1.2", 1, true, 4, 200 * ms, 0, 0},
		{"60", 1, true, 4, 200 * ms, 0, 0},
	}},
	{"leaky_bucket/shapes-at-rate", core.Policy{Algorithm: core.LeakyBucket, Limit: 10, Window: time.Second, Burst: 5}, []want{
		{"0", 1, true, 4, 100 * ms, 0, 0},
		{"0", 1, true, 3, 200 * ms, 0, 100 * ms},
		{"0", 1, true, 2, 300 * ms, 0, 200 * ms},
		{"0", 1, true, 1, 400 * ms, 0, 300 * ms},
		{"0", 1, true, 0, 500 * ms, 0, 400 * ms},
		{"0", 1, false, 0, 500 * ms, 100 * ms, 0},
		{"0", 1, false, 0, 500 * ms, 100 * ms, 0},
		{"0.05", 1, false, 0, 450 * ms, 50 * ms, 0},
		{"0.099", 1, false, 0, 401 * ms, 1 * ms, 0},
		{"0.1", 1, true, 0, 500 * ms, 0, 400 * ms},
		{"1", 1, true, 4, 100 * ms, 0, 0},
	}},
	{"leaky_bucket/weighted", core.Policy{Algorithm: core.LeakyBucket, Limit: 10, Window: time.Second}, []want{
		{"0", 5, true, 5, 500 * ms, 0, 0},
		{"0", 4, true, 1, 900 * ms, 0, 500 * ms},
		{"0", 2, false, 1, 900 * ms, 100 * ms, 0},
		{"0", 2, false, 1, 900 * ms, 100 * ms, 0},
		{"0", 1, true, 0, 1000 * ms, 0, 900 * ms},
		{"0.5", 5, true, 0, 1000 * ms, 0, 500 * ms},
		{"0.5", 10, false, 0, 1000 * ms, 1000 * ms, 0},
	}},
}

// TestConformanceDecisions replays the conformance suite's histories, as CSV
// traces, through the simulator and compares every Decision.
func TestConformanceDecisions(t *testing.T) {
	for _, c := range conformance {
		t.Run(c.name, func(t *testing.T) {
			var csv strings.Builder
			for _, s := range c.steps {
				fmt.Fprintf(&csv, "%s,client,%d\n", s.at, s.cost)
			}
			events, err := sim.ParseCSV(strings.NewReader(csv.String()))
			require.NoError(t, err)
			p := c.policy
			p.Name = "p"
			res, err := sim.Run(context.Background(), []core.Policy{p}, events, sim.Options{Decisions: true})
			require.NoError(t, err)
			require.Len(t, res, 1)
			require.Len(t, res[0].Decisions, len(c.steps))
			for i, s := range c.steps {
				d := res[0].Decisions[i]
				got := fmt.Sprintf("allowed=%v limit=%d rem=%d reset=%v retry=%v delay=%v", d.Allowed, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, d.Delay)
				exp := fmt.Sprintf("allowed=%v limit=%d rem=%d reset=%v retry=%v delay=%v", s.allowed, p.Capacity(), s.rem, s.reset, s.retry, s.delay)
				assert.Equal(t, exp, got, "step %d at %s", i, s.at)
			}
		})
	}
}

func TestWorstWindowAndFirstDenial(t *testing.T) {
	// The edge pattern: 10 in the last 50ms of each second, 10 in the first
	// 50ms of the next. The fixed window admits 20 in 100ms; the others 10.
	events, err := sim.Generate(sim.Pattern{Name: "edge", Duration: 5 * time.Second, Burst: 10, Period: time.Second})
	require.NoError(t, err)
	policies, err := sim.ParsePolicy("alg=all,limit=10,window=1s")
	require.NoError(t, err)
	res, err := sim.Run(context.Background(), policies, events, sim.Options{TopKeys: 3, Bucket: 100 * ms})
	require.NoError(t, err)
	require.Len(t, res, 5)
	for _, r := range res {
		assert.Equal(t, r.Admitted+r.Denied, r.Offered, r.Policy.Name)
		if r.Policy.Algorithm == core.FixedWindow {
			assert.Equal(t, int64(20), r.Worst, "fixed window: 2L across the edge")
		} else {
			assert.Equal(t, int64(10), r.Worst, r.Policy.Name)
		}
		assert.GreaterOrEqual(t, r.FirstDenial, time.Duration(0), r.Policy.Name)
		require.Len(t, r.Keys, 1)
		assert.Equal(t, "attacker", r.Keys[0].Key)
		var offered, admitted int64
		for _, pt := range r.Series {
			offered += pt.Offered
			admitted += pt.Admitted
		}
		assert.Equal(t, r.Offered, offered)
		assert.Equal(t, r.Admitted, admitted)
	}
}

func TestNoDenial(t *testing.T) {
	events, err := sim.Generate(sim.Pattern{Name: "steady", Duration: 10 * time.Second, Rate: 5})
	require.NoError(t, err)
	require.Len(t, events, 50)
	p, err := sim.ParsePolicy("alg=token,limit=10,window=1s")
	require.NoError(t, err)
	res, err := sim.Run(context.Background(), p, events, sim.Options{})
	require.NoError(t, err)
	assert.Equal(t, time.Duration(-1), res[0].FirstDenial)
	assert.Equal(t, int64(50), res[0].Admitted)
}

func TestParseErrorsNameLineAndColumn(t *testing.T) {
	cases := []struct {
		name, csv, jsonl string
		line, col        int
	}{
		{name: "bad time", csv: "0,a\n0.5,b\nxyz,c\n", line: 3, col: 1},
		{name: "bad cost", csv: "0,a\n1,bb,zero\n", line: 2, col: 6},
		{name: "empty key", csv: "0,a\n1, ,2\n", line: 2, col: 3},
		{name: "fields", csv: "0\n", line: 1, col: 1},
		{name: "back in time", csv: "2,a\n1,a\n", line: 2, col: 1},
		{name: "negative", csv: "-1,a\n", line: 1, col: 1},
		{name: "json syntax", jsonl: `{"t":0,"key":"a"}` + "\n" + `{"t":1,"key":"a",}`, line: 2, col: 18},
		{name: "json type", jsonl: `{"t":0,"key":7}`, line: 1, col: 14},
		{name: "json time", jsonl: `{"t":0,"key":"a"}` + "\n" + `{"key":"a", "t":"soon"}`, line: 2, col: 13},
		{name: "json cost", jsonl: `{"t":0,"key":"a","cost":0}`, line: 1, col: 18},
		{name: "json unknown", jsonl: `{"t":0,"key":"a","kost":1}`, line: 1, col: 18},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.csv != "" {
				_, err = sim.ParseCSV(strings.NewReader(c.csv))
			} else {
				_, err = sim.ParseJSONL(strings.NewReader(c.jsonl))
			}
			var pe *sim.ParseError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, c.line, pe.Line, err.Error())
			assert.Equal(t, c.col, pe.Col, err.Error())
		})
	}
}

func TestParseFormats(t *testing.T) {
	ev, err := sim.ParseCSV(strings.NewReader("timestamp,key,cost\n# comment\n\n2030-01-01T00:00:01.5Z,a,3\n2500ms,b\n"))
	require.NoError(t, err)
	require.Len(t, ev, 2)
	assert.Equal(t, sim.Epoch.Add(1500*ms), ev[0].At)
	assert.Equal(t, int64(3), ev[0].Cost)
	assert.Equal(t, sim.Epoch.Add(2500*ms), ev[1].At)
	ev, err = sim.ParseJSONL(strings.NewReader(`{"t":1.25,"key":"a"}` + "\n" + `{"t":"2030-01-01T00:00:02Z","key":"b","cost":2}`))
	require.NoError(t, err)
	require.Len(t, ev, 2)
	assert.Equal(t, sim.Epoch.Add(1250*ms), ev[0].At)
	assert.Equal(t, int64(2), ev[1].Cost)
}

func TestParsePolicyErrors(t *testing.T) {
	for _, spec := range []string{"", "alg=nope,limit=1,window=1s", "limit=1,window=1s", "alg=fixed,limit=x,window=1s",
		"alg=fixed,limit=1,window=1s,limit=2", "alg=fixed,limit=0,window=1s", "alg=fixed,limit=1,window=1s,color=red"} {
		_, err := sim.ParsePolicy(spec)
		assert.Error(t, err, spec)
	}
}

func TestManyIsDeterministic(t *testing.T) {
	p := sim.Pattern{Name: "many", Duration: time.Minute, Rate: 1, Clients: 50, Seed: 7}
	a, err := sim.Generate(p)
	require.NoError(t, err)
	b, err := sim.Generate(p)
	require.NoError(t, err)
	assert.Equal(t, a, b)
	require.Len(t, a, 3000)
	for i := 1; i < len(a); i++ {
		require.False(t, a[i].At.Before(a[i-1].At))
	}
}

// BenchmarkHourOfManyClients replays one hour of 1,000,000 requests from
// 10,000 clients against one fixed-window policy.
func BenchmarkHourOfManyClients(b *testing.B) {
	events, err := sim.Generate(sim.Pattern{Name: "many", Duration: time.Hour, Rate: 1e6 / 3600 / 1e4, Clients: 10_000, Seed: 1})
	require.NoError(b, err)
	require.Len(b, events, 1_000_000)
	p, err := sim.ParsePolicy("alg=token,limit=60,window=1m,burst=10")
	require.NoError(b, err)
	b.ResetTimer()
	for b.Loop() {
		_, err := sim.Run(context.Background(), p, events, sim.Options{TopKeys: 10, Bucket: time.Minute})
		require.NoError(b, err)
	}
}

// TestWorstIsPerKey: two clients each at their limit in the same second; the
// worst case is one client's 10, not the 20 of both.
func TestWorstIsPerKey(t *testing.T) {
	var csv strings.Builder
	for i := range 10 {
		fmt.Fprintf(&csv, "0.%d,a\n0.%d,b\n", i, i)
	}
	events, err := sim.ParseCSV(strings.NewReader(csv.String()))
	require.NoError(t, err)
	p, err := sim.ParsePolicy("alg=log,limit=10,window=1s")
	require.NoError(t, err)
	res, err := sim.Run(context.Background(), p, events, sim.Options{TopKeys: 2})
	require.NoError(t, err)
	assert.Equal(t, int64(20), res[0].Admitted)
	assert.Equal(t, int64(10), res[0].Worst)
	require.Len(t, res[0].Keys, 2)
	assert.Equal(t, int64(10), res[0].Keys[0].Worst)
}

func TestProgressAndCancel(t *testing.T) {
	events, err := sim.Generate(sim.Pattern{Name: "many", Duration: time.Minute, Rate: 10, Clients: 300, Seed: 1})
	require.NoError(t, err)
	p, err := sim.ParsePolicy("alg=fixed,limit=5,window=1s")
	require.NoError(t, err)
	var calls []int
	_, err = sim.Run(context.Background(), p, events, sim.Options{Progress: func(_ string, done, total int) {
		assert.Equal(t, len(events), total)
		calls = append(calls, done)
	}})
	require.NoError(t, err)
	assert.Equal(t, []int{0, 65536, 131072}, calls)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = sim.Run(ctx, p, events, sim.Options{})
	assert.ErrorIs(t, err, context.Canceled)
}
