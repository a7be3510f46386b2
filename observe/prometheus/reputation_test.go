package promlimit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/reputation"
)

// TestReputationMetrics: the signals, the bans and the clients by band,
// and the highest and mean score, as a scrape reads them.
func TestReputationMetrics(t *testing.T) {
	m, reg := newMetrics(t)
	rep, err := reputation.New(reputation.Config{Bands: []reputation.Band{{Name: "suspicious", Above: 2, Scale: 0.5}, {Name: "abusive", Above: 4, Ban: true}}})
	require.NoError(t, err)
	require.NoError(t, m.WatchReputation(rep))
	assert.ErrorIs(t, m.WatchReputation(rep), core.ErrInvalidOption, "one Tracker per Metrics")
	assert.ErrorIs(t, m.WatchReputation(nil), core.ErrInvalidOption)
	ctx := context.Background()
	for range 5 { // into abusive: banned once
		rep.Record(ctx, "ip:192.0.2.1", reputation.Unrouted)
	}
	for range 3 { // suspicious
		rep.Record(ctx, "ip:192.0.2.2", reputation.Refused)
	}
	rep.Record(ctx, "ip:192.0.2.3", reputation.Denied)
	want := `
# HELP ratelimit_reputation_bans_total Bans a reputation made as clients entered a band, by band; mode=shadow counts those a reputation in shadow mode would have made.
# TYPE ratelimit_reputation_bans_total counter
ratelimit_reputation_bans_total{band="abusive",mode="enforced"} 1
ratelimit_reputation_bans_total{band="abusive",mode="shadow"} 0
ratelimit_reputation_bans_total{band="suspicious",mode="enforced"} 0
ratelimit_reputation_bans_total{band="suspicious",mode="shadow"} 0
# HELP ratelimit_reputation_clients Clients whose score, as this server holds it, is in a band, by band.
# TYPE ratelimit_reputation_clients gauge
ratelimit_reputation_clients{band="abusive"} 1
ratelimit_reputation_clients{band="suspicious"} 1
# HELP ratelimit_reputation_signals_total Signals a reputation scored, by kind.
# TYPE ratelimit_reputation_signals_total counter
ratelimit_reputation_signals_total{signal="denied"} 1
ratelimit_reputation_signals_total{signal="deny_listed"} 0
ratelimit_reputation_signals_total{signal="locked_out"} 0
ratelimit_reputation_signals_total{signal="not_found"} 0
ratelimit_reputation_signals_total{signal="refused"} 3
ratelimit_reputation_signals_total{signal="reported"} 0
ratelimit_reputation_signals_total{signal="unrouted"} 5
`
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"ratelimit_reputation_bans_total", "ratelimit_reputation_clients", "ratelimit_reputation_signals_total"))
	assert.InDelta(t, 5, gaugeOf(t, reg, "ratelimit_reputation_score_max"), 0.01, "the highest score")
	assert.InDelta(t, 3, gaugeOf(t, reg, "ratelimit_reputation_score_mean"), 0.01, "(5 + 3 + 1) / 3")
}

// gaugeOf returns the value of the gauge named name, without labels.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// TestReputationShadowBans: a reputation in shadow mode counts the bans it
// would have made under mode="shadow", and none under mode="enforced".
func TestReputationShadowBans(t *testing.T) {
	m, reg := newMetrics(t)
	rep, err := reputation.New(reputation.Config{Shadow: true, Bands: []reputation.Band{{Name: "abusive", Above: 4, Ban: true}}})
	require.NoError(t, err)
	require.NoError(t, m.WatchReputation(rep))
	for range 5 {
		rep.Record(context.Background(), "ip:192.0.2.1", reputation.Unrouted)
	}
	want := `
# HELP ratelimit_reputation_bans_total Bans a reputation made as clients entered a band, by band; mode=shadow counts those a reputation in shadow mode would have made.
# TYPE ratelimit_reputation_bans_total counter
ratelimit_reputation_bans_total{band="abusive",mode="enforced"} 0
ratelimit_reputation_bans_total{band="abusive",mode="shadow"} 1
`
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "ratelimit_reputation_bans_total"))
}
