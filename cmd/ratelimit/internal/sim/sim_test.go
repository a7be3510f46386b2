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
		assert.Equal(t, r.FirstDenial, r.Keys[0].FirstDenial, "one key: its first denial is the policy's")
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
	// A header row of other names, after comments, or behind a
	// spreadsheet's byte-order mark, is skipped too; one after the first
	// event is an error.
	for _, in := range []string{"# trace\nTime,Client,Cost\n0,a\n1,b,2\n", "ts,key\n0,a\n1,b,2\n", "\ufefftimestamp,key,cost\n0,a\n1,b,2\n", "\ufeff0,a\n1,b,2\n"} {
		ev, err := sim.ParseCSV(strings.NewReader(in))
		require.NoError(t, err, "%q", in)
		assert.Equal(t, []sim.Event{{At: sim.Epoch, Key: "a", Cost: 1}, {At: sim.Epoch.Add(time.Second), Key: "b", Cost: 2}}, ev, "%q", in)
	}
	_, err = sim.ParseCSV(strings.NewReader("0,a\ntimestamp,key\n"))
	require.Error(t, err, "a header after an event")
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
	assert.Equal(t, time.Duration(-1), res[0].Keys[0].FirstDenial, "no denial")
}

// TestFirstDenialPerKey: each key's first denial is its own; the policy's
// is the earliest.
func TestFirstDenialPerKey(t *testing.T) {
	events, err := sim.ParseCSV(strings.NewReader("0,a\n0.1,a\n0.2,b\n0.3,b\n0.4,b\n0.5,a\n0.6,c\n"))
	require.NoError(t, err)
	p, err := sim.ParsePolicy("alg=fixed,limit=2,window=1s")
	require.NoError(t, err)
	res, err := sim.Run(context.Background(), p, events, sim.Options{TopKeys: 3})
	require.NoError(t, err)
	assert.Equal(t, 400*ms, res[0].FirstDenial)
	got := map[string]time.Duration{}
	for _, k := range res[0].Keys {
		got[k.Key] = k.FirstDenial
	}
	assert.Equal(t, map[string]time.Duration{"a": 500 * ms, "b": 400 * ms, "c": -1}, got)
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
