package core

import (
	"errors"
	"fmt"
	"time"
)

// Outcome says what became of one call to a Limiter, for observers. It
// refines Decision.Source with Allowed, and names the calls that ended
// without a decision.
type Outcome uint8

const (
	// OutcomeAllowed: the store admitted the request.
	OutcomeAllowed Outcome = iota
	// OutcomeDenied: the store denied the request.
	OutcomeDenied
	// OutcomeDenyCache: the deny cache denied the request (WithDenyCache),
	// sparing the store a call.
	OutcomeDenyCache
	// OutcomeFallbackAllowed: the fallback store admitted the request,
	// because the store failed or its circuit breaker was open
	// (WithFallback).
	OutcomeFallbackAllowed
	// OutcomeFallbackDenied: the fallback store denied the request: the
	// store failed, or the Limiter was Recovering and the fallback refused
	// what the store admitted.
	OutcomeFallbackDenied
	// OutcomeFailedOpen: the store failed and FailOpen admitted the request.
	OutcomeFailedOpen
	// OutcomeFailedClosed: the store failed and FailClosed refused the
	// request.
	OutcomeFailedClosed
	// OutcomeCanceled: the caller's context ended before a decision
	// (ErrCanceled); the request was not admitted.
	OutcomeCanceled
	// OutcomeInvalid: the call was refused for bad input (an empty key, a
	// bad cost); no one decided.
	OutcomeInvalid
	// OutcomeShadowDenied: the Limiter is in shadow mode (WithShadow) and
	// admitted a request it would have denied (Decision.Shadowed), whoever
	// denied it: the store, a lockout, the deny cache, the fallback or
	// FailClosed.
	OutcomeShadowDenied
	// OutcomeLockedOut: the store denied the request by the policy's
	// Lockout (Decision.LockedOut): the request that started a lockout, or
	// one made during it.
	OutcomeLockedOut
	// OutcomeAllowListed: the HTTP flow admitted the request without
	// asking the Limiter, its client being on an allow list; reported
	// through Limiter.Report.
	OutcomeAllowListed
	// OutcomeDenyListed: the HTTP flow refused the request without asking
	// the Limiter, its client being on a deny list (or banned); reported
	// through Limiter.Report.
	OutcomeDenyListed
	numOutcomes
)

// outcomeNames are the Outcomes' String values, in order.
var outcomeNames = [numOutcomes]string{
	"allowed", "denied", "deny_cache", "fallback_allowed", "fallback_denied",
	"failed_open", "failed_closed", "canceled", "invalid",
	"shadow_denied", "locked_out", "allow_listed", "deny_listed",
}

// String returns the outcome's name as exporters label it: "allowed",
// "denied", "deny_cache", "fallback_allowed", "fallback_denied",
// "failed_open", "failed_closed", "canceled", "invalid", "shadow_denied",
// "locked_out", "allow_listed" or "deny_listed".
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Admitted reports whether the request passed: OutcomeAllowed,
// OutcomeFallbackAllowed, OutcomeFailedOpen, OutcomeShadowDenied and
// OutcomeAllowListed.
func (o Outcome) Admitted() bool {
	return o == OutcomeAllowed || o == OutcomeFallbackAllowed || o == OutcomeFailedOpen ||
		o == OutcomeShadowDenied || o == OutcomeAllowListed
}

// Outcomes returns every Outcome, in order, so that an exporter can create
// its series up front (a series that appears only on the first denial
// hides the first denials from rate()).
func Outcomes() []Outcome {
	o := make([]Outcome, numOutcomes)
	for i := range o {
		o[i] = Outcome(i)
	}
	return o
}

// Event is one call to a Limiter, as an Observer hears it.
type Event struct {
	// Policy is the Limiter's policy, Name filled in: the name exporters
	// label the limit with. It is the Limiter's own: read it, never change
	// it.
	Policy *Policy
	// Key is the client key as the store sees it: a key longer than
	// 128 bytes or with odd bytes is already a SHA-256 digest (see
	// 128 bytes), and keyfuncs hashes API keys before they reach the
	// Limiter. It is empty for OutcomeInvalid calls refused before the key
	// was checked. It is valid only during Observe: an observer that keeps
	// it must copy it (strings.Clone), since it may share memory with a
	// request buffer that is reused.
	Key string
	// Cost is the request's cost, as asked.
	Cost int64
	// Outcome is what became of the call.
	Outcome Outcome
	// Decision is what the Limiter returned.
	Decision Decision
	// Err is the error the Limiter returned with it, if any: a store
	// failure (wrapping ErrStore), ErrCanceled, or bad input.
	Err error
	// StoreLatency is how long the store took to decide, or to give up (a
	// timeout), for a store that may block (Redis). It is 0 when the store
	// was not asked (deny cache, open circuit breaker, bad input, a caller
	// already gone), and for an in-process store (memstore: its Take returns
	// the time it decided at): such a store never waits and has no timeout to
	// measure against, and it decides in about 100 ns, less than reading
	// the clock twice would cost.
	StoreLatency time.Duration
	// Binding is true for the layer that bound the request's decision
	// (see Verdict), and always for a Limiter with one policy. A layered
	// request gives one Event per layer that applied: the binding layer's
	// carries the request's Decision, Err and Outcome; every other layer's
	// carries that layer's own Decision and Outcome (allowed when it would
	// have admitted, even if another layer denied the request, in which
	// case it took nothing). Count requests with Binding true; count a
	// layer's own view with every Event.
	Binding bool
}

// LimitName returns the name of the event's limit, Policy.Name: "" when
// Policy is nil, as in an Event made by hand.
func (e *Event) LimitName() string {
	if e.Policy == nil {
		return ""
	}
	return e.Policy.Name
}

// NearLimit reports whether the request was admitted by a decision on the
// client's quota and left less than a fifth of the policy's capacity: a
// client close to being denied, as Envoy's near_limit counter counts it.
// A shadowed denial is past the limit, not near it; FailOpen and the allow
// list said nothing of the quota.
func (e *Event) NearLimit() bool {
	return e.Outcome.Admitted() && e.Decision.Source != SourceFailMode &&
		e.Outcome != OutcomeShadowDenied && e.Outcome != OutcomeAllowListed &&
		e.Decision.Remaining*5 < e.Decision.Limit
}

// Store error kinds, as StoreErrorKind names them.
const (
	// StoreErrTimeout: the store did not answer within the Limiter's
	// timeout (ErrTimeout).
	StoreErrTimeout = "timeout"
	// StoreErrCircuitOpen: the circuit breaker was open, and the store not
	// asked (ErrCircuitOpen).
	StoreErrCircuitOpen = "circuit_open"
	// StoreErrFailed: any other failure of the store.
	StoreErrFailed = "error"
)

// StoreErrorKind names the kind of store failure err reports, for a
// bounded metric label: StoreErrTimeout, StoreErrCircuitOpen or
// StoreErrFailed; "" when err does not wrap ErrStore (nil, bad input,
// ErrCanceled).
func StoreErrorKind(err error) string {
	switch {
	case err == nil || !errors.Is(err, ErrStore) || errors.Is(err, ErrCanceled):
		return ""
	case errors.Is(err, ErrCircuitOpen):
		return StoreErrCircuitOpen
	case errors.Is(err, ErrTimeout):
		return StoreErrTimeout
	}
	return StoreErrFailed
}

// Observer hears every call to the Limiters it is given to (WithObserver):
// every decision, whoever made it, and every call refused without one.
// Observe runs on the caller's goroutine, after the decision and before
// the Limiter returns it, so it must be fast, must not block, and must be
// safe for concurrent use. It cannot change the decision.
type Observer interface {
	Observe(e Event)
}

// Binder is an Observer that wants to know each Limiter it observes:
// NewLimiter calls Bind once with the Limiter (fully built) and gives the
// Limiter's events to the Observer that Bind returns instead. An exporter
// uses it to resolve its per-limit series once, rather than on every
// event, and to watch the Limiter's Health and deny cache. An error fails
// NewLimiter.
type Binder interface {
	Observer
	Bind(l *Limiter) (Observer, error)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(e Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// WithObserver makes the Limiter report every call to o (see Observer). A
// Limiter without one pays nothing for observation. Several WithObserver
// options add up, and each observer hears every event, in the order given.
// A nil o is invalid.
func WithObserver(o Observer) Option {
	return func(c *config) error {
		if o == nil {
			return fmt.Errorf("%w: nil observer", ErrInvalidOption)
		}
		c.observers = append(c.observers, o)
		return nil
	}
}

// bindObservers returns the observers l reports to, Binders bound.
func bindObservers(l *Limiter, observers []Observer) ([]Observer, error) {
	if len(observers) == 0 {
		return nil, nil
	}
	bound := make([]Observer, len(observers))
	for i, o := range observers {
		if b, ok := o.(Binder); ok {
			bo, err := b.Bind(l)
			if err != nil {
				return nil, fmt.Errorf("%w: observer %d (%T): %w", ErrInvalidOption, i, o, err)
			}
			if bo == nil {
				return nil, fmt.Errorf("%w: observer %d (%T) bound to nil", ErrInvalidOption, i, o)
			}
			o = bo
		}
		bound[i] = o
	}
	return bound, nil
}

// watch is what an observed decision records while it runs.
type watch struct {
	key     string        // the key as the store sees it
	latency time.Duration // the store's, when measured
}

// observe reports a call of cost n that returned *d and err to every
// observer.
func (l *Limiter) observe(n int64, p *watch, d *Decision, err error) {
	l.observeAs(&l.policy, n, p, d, err, true)
}

// observeAs is observe of a decision under policy (a layer's).
func (l *Limiter) observeAs(policy *Policy, n int64, p *watch, d *Decision, err error, binding bool) {
	outcome := OutcomeAllowed // the hot path's, without a call
	if err != nil || d.Source != SourceStore || !d.Allowed || d.Shadowed {
		outcome = outcomeOf(d, err)
	}
	if len(l.observers) == 1 {
		// Built in the argument's place: one copy of the Event, not two.
		l.observers[0].Observe(Event{Policy: policy, Key: p.key, Cost: n, Outcome: outcome,
			Decision: *d, Err: err, StoreLatency: p.latency, Binding: binding})
		return
	}
	e := Event{Policy: policy, Key: p.key, Cost: n, Outcome: outcome,
		Decision: *d, Err: err, StoreLatency: p.latency, Binding: binding}
	for _, o := range l.observers {
		o.Observe(e)
	}
}

// outcomeOf derives the Outcome of a call from what it returned.
func outcomeOf(d *Decision, err error) Outcome {
	if err != nil && (!errors.Is(err, ErrStore) || errors.Is(err, ErrCanceled)) {
		if errors.Is(err, ErrCanceled) {
			return OutcomeCanceled
		}
		return OutcomeInvalid
	}
	if d.Shadowed {
		return OutcomeShadowDenied
	}
	switch d.Source {
	case SourceDenyCache:
		return OutcomeDenyCache
	case SourceFallback:
		if d.Allowed {
			return OutcomeFallbackAllowed
		}
		return OutcomeFallbackDenied
	case SourceFailMode:
		if d.Allowed {
			return OutcomeFailedOpen
		}
		return OutcomeFailedClosed
	}
	if d.Allowed {
		return OutcomeAllowed
	}
	if d.LockedOut {
		return OutcomeLockedOut
	}
	return OutcomeDenied
}

// Report tells the Limiter's observers of a request of cost that the
// caller decided without asking the Limiter: o is OutcomeAllowListed or
// OutcomeDenyListed, as the HTTP flow reports its allow and deny lists.
// The observers hear an Event with the key as the store would see it (see
// Event.Key), the cost, o, and a Decision that says nothing of the
// client's quota: Allowed as o admits, Limit the policy's Capacity, and
// Policy; no store is asked. Without observers, Report only checks its
// arguments. It fails with ErrInvalidOption for any other outcome,
// ErrInvalidKey for an empty key and ErrInvalidCost for a cost below 1.
func (l *Limiter) Report(key string, cost int64, o Outcome) error {
	if o != OutcomeAllowListed && o != OutcomeDenyListed {
		return fmt.Errorf("%w: Report takes %s or %s, not %s", ErrInvalidOption, OutcomeAllowListed, OutcomeDenyListed, o)
	}
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if cost < 1 {
		return fmt.Errorf("%w: cost %d is not positive", ErrInvalidCost, cost)
	}
	if l.observers == nil {
		return nil
	}
	key, err := normalizeKey(key)
	if err != nil {
		return err
	}
	d := Decision{Allowed: o == OutcomeAllowListed, Limit: l.capacity, Policy: l.policy}
	e := Event{Policy: &l.policy, Key: key, Cost: cost, Outcome: o, Decision: d, Binding: true}
	for _, obs := range l.observers {
		obs.Observe(e)
	}
	return nil
}

// observeLayers reports a layered request: one Event per layer that
// applied, the binding layer's with the request's decision and err, the
// others' with their own decision (when the store gave one) and no error.
func (l *Limiter) observeLayers(checks []Check, reqs []Request, p *watch, v *Verdict, err error) {
	ls := l.layered
	for i := range reqs {
		p.key = reqs[i].Key
		if i == v.Binding {
			l.observeAs(&ls.layers[checks[i].Layer].Policy, reqs[i].Cost, p, &v.Decision, err, true)
			continue
		}
		d := &v.Decision
		if i < len(v.Decisions) {
			d = &v.Decisions[i]
		}
		l.observeAs(&ls.layers[checks[i].Layer].Policy, reqs[i].Cost, p, d, nil, false)
	}
}
