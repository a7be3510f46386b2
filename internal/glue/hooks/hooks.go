// Package hooks lets the module's tests and exporters reach what the
// public API does not show. It imports nothing of the module; core and the
// stores set or read its variables.
package hooks

import (
	"context"
	"time"
)

// The reputation's hooks, for httplimit (a *reputation.Tracker as t; the
// package sets them in its init). ReputationKey is the Tracker's own key
// function's key for r (ReputationHasKey: it has one); ReputationSignal scores signal s (a
// reputation.Signal) of key; ReputationContext returns ctx carrying the
// request's Tracker and key, for reputation.Report; ReputationBans is the
// Tracker's bans, an access.Matcher (nil in shadow mode, which bans no
// one); ReputationScales reports whether a band scales limits, out of
// shadow mode (the Tracker is then a PolicySource of the Limiter's);
// ReputationHasKey reports whether it has a Key of its own; ReputationTest sets a Tracker's clock and its outcome hook,
// for tests.
var (
	ReputationKey     func(t any, r any) (string, error)
	ReputationSignal  func(t any, ctx context.Context, key string, s uint8)
	ReputationContext func(t any, ctx context.Context, key string) context.Context
	ReputationBans    func(t any) any
	ReputationScales  func(t any) bool
	ReputationHasKey  func(t any) bool
	ReputationTest    func(t any, now func() time.Time, on func(key string, s uint8, score float64, band string, acted bool))
)

// ReputationStats returns what a *reputation.Tracker's metrics report
// (observe/prometheus reads it at each scrape): the signals scored by
// kind, each band's clients held in this process and its bans, and the
// highest and mean score held. The reputation package sets it.
var ReputationStats func(t any) RepStats

// RepStats is ReputationStats's answer.
type RepStats struct {
	Signals             []RepCount
	Bands               []RepBand
	MaxScore, MeanScore float64
}

// RepCount is a signal kind's count.
type RepCount struct {
	Name string
	N    uint64
}

// RepBand is a band's clients, bans made, and bans not made in shadow
// mode.
type RepBand struct {
	Name             string
	Clients          int
	Bans, ShadowBans uint64
}

// SourceUntouched returns, for a core.PolicySource that can tell them, a
// function reporting the keys it leaves as they are, or nil: a
// *reputation.Tracker, whose clients in no band that scales are left
// alone. core.NewLimiter asks it of a Limiter's one source, so that
// those keys keep the direct path. The reputation package sets it.
var SourceUntouched func(src any) func(key string) bool
