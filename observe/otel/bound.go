package otellimit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/outcome"
)

// bound is the Observer of one limit: its measurement options, resolved
// once, so that Observe builds no attributes and allocates nothing.
type bound struct {
	m *Metrics
	l *core.Limiter

	outcomes [][]metric.AddOption // by outcome.Outcome
	near     []metric.AddOption
	errors   [len(storeErrorKinds)][]metric.AddOption
	record   []metric.RecordOption

	health [len(healthStates)]metric.ObserveOption
}

// newBound resolves the measurement options of the limit name, observed
// from l.
func (m *Metrics) newBound(name string, l *core.Limiter) *bound {
	limit := attribute.String(attrLimit, name)
	only := attribute.NewSet(limit)
	b := &bound{
		m:      m,
		l:      l,
		near:   []metric.AddOption{metric.WithAttributeSet(only)},
		record: []metric.RecordOption{metric.WithAttributeSet(only)},
	}
	for _, o := range outcome.All() {
		set := attribute.NewSet(limit, attribute.String(attrOutcome, o.String()))
		b.outcomes = append(b.outcomes, []metric.AddOption{metric.WithAttributeSet(set)})
	}
	for i, k := range storeErrorKinds {
		set := attribute.NewSet(limit, attribute.String(attrKind, k))
		b.errors[i] = []metric.AddOption{metric.WithAttributeSet(set)}
	}
	for i, h := range healthStates {
		b.health[i] = metric.WithAttributeSet(attribute.NewSet(limit, attribute.String(attrState, h.String())))
	}
	return b
}

// zero creates every counter series of the limit at 0.
func (b *bound) zero() {
	ctx := context.Background()
	for _, o := range b.outcomes {
		b.m.decisions.Add(ctx, 0, o...)
	}
	b.m.nearLimit.Add(ctx, 0, b.near...)
	for _, e := range b.errors {
		b.m.errors.Add(ctx, 0, e...)
	}
}

// observe records one event of the limit.
func (b *bound) observe(e core.Event) {
	if b.m.closed.Load() {
		return
	}
	ctx := context.Background()
	if oc := outcome.Of(&e.Decision); int(oc) < len(b.outcomes) {
		b.m.decisions.Add(ctx, 1, b.outcomes[oc]...)
	}
	if outcome.NearLimit(&e.Decision) {
		b.m.nearLimit.Add(ctx, 1, b.near...)
	}
	if e.StoreLatency > 0 {
		b.m.duration.Record(ctx, e.StoreLatency.Seconds(), b.record...)
	}
	if e.Err != nil {
		if i := errorIndex(outcome.StoreErrorKind(e.Err)); i >= 0 {
			b.m.errors.Add(ctx, 1, b.errors[i]...)
		}
	}
}

// errorIndex is the index of kind in storeErrorKinds, -1 for none.
func errorIndex(kind string) int {
	for i, k := range storeErrorKinds {
		if k == kind {
			return i
		}
	}
	return -1
}
