package core

import (
	"fmt"
	"time"
)

// Event is one layer of one call to a Limiter, as an observer hears it.
type Event struct {
	// Decision is the layer's decision. Its Policy names the limit
	// (Policy.Name, the name exporters label it with). On the binding
	// layer, it is what the call returned; a call that decided nothing
	// (bad input, the caller gone) is heard too, with Source SourceStore
	// and Err the call's error.
	Decision
	// Key is the client key as the store sees it: a key longer than 128
	// bytes or with odd bytes is already a SHA-256 digest, and keyfuncs
	// hashes API keys before they reach the Limiter. It is empty for calls
	// refused before the key was checked. It is valid only during the
	// call: an observer that keeps it must copy it (strings.Clone), since
	// it may share memory with a request buffer that is reused.
	Key string
	// Cost is the cost asked of this layer.
	Cost int64
	// StoreLatency is how long the store took to decide, or to give up (a
	// timeout), for a store that may block (Redis). It is 0 when the store
	// was not asked (deny cache, open circuit breaker, bad input, a caller
	// already gone), and for an in-process store (memstore: its Take returns
	// the time it decided at): such a store never waits, and decides in
	// about 100 ns, less than reading the clock twice would cost.
	StoreLatency time.Duration
	// Binding is true for the layer that bound the request's decision
	// (see Limiter.AllowLayers), and always for a Limiter of one policy. A
	// layered request gives one Event per layer that applied: the binding
	// layer's carries the request's Decision; every other layer's carries
	// that layer's own (Allowed when it would have admitted, even if
	// another layer denied the request, in which case it took nothing).
	// Count requests with Binding true; count a layer's own view with
	// every Event.
	Binding bool
}

// Observer hears every call to the Limiters it is given to (WithObserver):
// every decision, whoever made it, and every call refused without one.
// NewLimiter calls Bind once, with the Limiter fully built, and gives the
// Limiter's events to the function Bind returns: an exporter resolves its
// per-limit series there once, rather than on every event, and watches the
// Limiter's Health and deny cache. An error fails NewLimiter.
//
// The function runs on the caller's goroutine, after the decision and
// before the Limiter returns it, so it must be fast, must not block, and
// must be safe for concurrent use. It cannot change the decision.
type Observer interface {
	Bind(l *Limiter) (func(Event), error)
}

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

// bindObservers returns the functions l reports to.
func bindObservers(l *Limiter, observers []Observer) ([]func(Event), error) {
	if len(observers) == 0 {
		return nil, nil
	}
	bound := make([]func(Event), len(observers))
	for i, o := range observers {
		f, err := o.Bind(l)
		if err != nil {
			return nil, fmt.Errorf("%w: observer %d (%T): %w", ErrInvalidOption, i, o, err)
		}
		if f == nil {
			return nil, fmt.Errorf("%w: observer %d (%T) bound to nil", ErrInvalidOption, i, o)
		}
		bound[i] = f
	}
	return bound, nil
}

// watch is what an observed decision records while it runs.
type watch struct {
	key     string        // the key as the store sees it
	latency time.Duration // the store's, when measured
}

// observeAs reports a decision *d of cost n (a layer's) to every
// observer; err, the call's error when it decided nothing, is told as
// the Event's Err.
func (l *Limiter) observeAs(n int64, p *watch, d *Decision, err error, binding bool) {
	if err != nil {
		e := *d
		e.Err = err
		d = &e
	}
	if len(l.observers) == 1 {
		// Built in the argument's place: one copy of the Event, not two.
		l.observers[0](Event{Decision: *d, Key: p.key, Cost: n, StoreLatency: p.latency, Binding: binding})
		return
	}
	e := Event{Decision: *d, Key: p.key, Cost: n, StoreLatency: p.latency, Binding: binding}
	for _, o := range l.observers {
		o(e)
	}
}

// Observe tells the Limiter's observers of a request of cost that the
// caller decided without asking the Limiter, by an allow list (allowed) or
// a deny list, as the HTTP flow tells of its lists. The observers hear an
// Event of the first layer with the key as the store would see it (see
// Event.Key), the cost, and a Decision that says nothing of the client's
// quota: Source SourceList, Allowed as given, Limit the policy's capacity,
// and Policy; no store is asked. Without observers, Observe only checks
// its arguments. It fails with ErrInvalidOption for an empty key or a cost
// below 1.
func (l *Limiter) Observe(key string, cost int64, allowed bool) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidOption)
	}
	if cost < 1 {
		return fmt.Errorf("%w: cost %d is not positive", ErrInvalidOption, cost)
	}
	if l.observers == nil {
		return nil
	}
	key, err := normalizeKey(key)
	if err != nil {
		return err
	}
	e := Event{Decision: Decision{Allowed: allowed, Source: SourceList, Limit: l.capacity, Policy: l.policy}, Key: key, Cost: cost, Binding: true}
	for _, o := range l.observers {
		o(e)
	}
	return nil
}
