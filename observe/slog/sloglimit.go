// Package sloglimit logs the refusals of rate limiters, and the decisions
// made without their store, through log/slog: a core.Observer, sampled so
// that a flood of denials cannot flood the log, that never logs a client
// key which may hold a secret.
//
// Give a Logger to every Limiter whose refusals are to be logged:
//
//	lg, err := sloglimit.New(slog.Default())
//	...
//	l, err := core.NewLimiter(store, policy, core.WithObserver(lg))
//
// # Records
//
// Each record has the message "rate limit: store failed" when the event's
// is a store failure (failed_open, failed_closed, and the
// fallback's decisions made because the store failed or its circuit
// breaker was open), "rate limit: request denied" for the other refusals
// (denied, locked_out, deny_cache, and fallback_denied while a Limiter
// recovers), "rate limit: request would have been denied (shadow mode)"
// for shadow_denied, or "rate limit: request " followed by the outcome
// (for the outcomes WithOutcomes may add), and these attributes:
//
//	limit        the policy's name
//	outcome      the outcome, as the metrics' outcome label names it: "denied", "deny_cache", "failed_open" ...
//	cost         the request's cost
//	remaining    Decision.Remaining
//	retry_after  Decision.RetryAfter (a slog duration: JSONHandler writes nanoseconds)
//	source       Decision.Source: "store", "fallback", "deny-cache", "fail-mode", "lease"
//	key          the client key, when it is shown as it is (see Keys)
//	key_hash     or its digest, 16 hex digits of its SHA-256 (HMAC-SHA256 with a secret, WithKeys)
//	error_kind   for store failures: "timeout", "circuit_open", "error"
//	error        the error's text, for any event that has one
//	suppressed   how many records of this limit and class were dropped since the last one written, when any were
//
// Denials are logged at slog.LevelInfo, store failures at slog.LevelWarn
// (WithLevels). A record at a level the logger does not enable costs one
// call to its Enabled and nothing more: it is not counted as suppressed
// either.
//
// # Sampling
//
// Each Limiter a Logger is given to has two samplers of its own, one for
// denials and one for store failures, so that a flood of denials cannot
// hide the first failure of the store: each writes at most 10 records at
// once and 10 per second after that (WithSampling). A dropped record costs no allocation and no lock; it is counted, and
// the next record written for that limit and class carries the count as
// "suppressed", so the log still tells the size of the flood. (Records
// dropped at the end of a flood are told by the next record, whenever it
// comes.) A request of several layers is logged once, as its binding
// layer decided it (core.Event.Binding).
//
// # Keys
//
// A client key reaches the Limiter as its key function made it, and a
// key function may pass anything, a raw API key included. By default
// (KeysSafe) a key is shown as it is, in "key", only when it is one of
// these forms, or several of them joined by "|" as keyfuncs.Compose
// joins them:
//
//   - "ip:" and an IP address or masked prefix in netip's canonical
//     form, as keyfuncs.ClientIP writes them ("ip:203.0.113.7",
//     "ip:2001:db8:1:100::/56");
//   - "key:" and 32 lowercase hex digits, an API key hashed by
//     keyfuncs.APIKeyHeader;
//   - "sha256:" and 64 lowercase hex digits, the digest the core puts in
//     place of a key longer than 128 bytes or with odd bytes.
//
// Any other key (a user ID, a route, a static key, whatever a key
// function of your own returns) is shown only as its digest, in
// "key_hash", and its occurrences in the error text are replaced by
// "[key]". A key function that dresses a secret in one of the forms
// above defeats this. KeysHashed shows every key as a digest, KeysHidden
// none, and KeysRaw every key as it is, which is unsafe for secrets.
package sloglimit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/outcome"
)

// Logger is a core.Observer that logs the events of the Limiters it is
// given to (core.WithObserver) through a *slog.Logger, sampled per
// Limiter: each Limiter gets samplers of its own when it is built (Bind),
// so that an event finds its samplers without a lookup.
// It is safe for concurrent use. The zero Logger is not usable; use New.
type Logger struct {
	logger    *slog.Logger
	outcomes  uint64 // bit o set: Outcome o is logged
	level     slog.Level
	errLevel  slog.Level
	rate      rate
	keys      KeyMode
	keySecret []byte
	epoch     time.Time        // the sampling clock's zero, with a monotonic reading
	now       func() time.Time // the sampling clock for tests; nil: time.Since(epoch)
}

var _ core.Observer = (*Logger)(nil)

// New returns a Logger writing to logger, slog.Default() when nil. It
// fails with an error wrapping core.ErrInvalidOption when an option is
// nil or out of range.
func New(logger *slog.Logger, opts ...Option) (*Logger, error) {
	if logger == nil {
		logger = slog.Default()
	}
	c := defaultConfig()
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: sloglimit.New: option %d is nil", core.ErrInvalidOption, i)
		}
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	l := &Logger{
		logger:    logger,
		outcomes:  c.outcomes,
		level:     c.level,
		errLevel:  c.errLevel,
		rate:      newRate(c.rate, c.burst),
		keys:      c.keys,
		keySecret: c.keySecret,
		epoch:     time.Now(),
	}
	return l, nil
}

// Bind returns the function that logs the events of the Limiter l, with
// samplers of l's own; NewLimiter calls it (see core.Observer). It never
// fails.
func (l *Logger) Bind(*core.Limiter) (func(core.Event), error) {
	return l.newLimitLog().observe, nil
}

// limitLog is a Logger bound to one Limiter: its samplers.
type limitLog struct {
	l          *Logger
	deny, fail *sampler
}

func (l *Logger) newLimitLog() *limitLog {
	return &limitLog{l: l, deny: newSampler(), fail: newSampler()}
}

// observe logs e, if it is its request's binding layer, its outcome is
// logged, its level enabled and its sampler has room. It is the hot
// path: a refusal that is dropped costs a bit test, the logger's Enabled,
// a clock reading and two atomic operations.
func (b *limitLog) observe(e core.Event) {
	l := b.l
	if !e.Binding {
		return
	}
	oc := outcome.Of(&e.Decision)
	if l.outcomes&(1<<oc) == 0 {
		return
	}
	var kind string
	if e.Err != nil {
		kind = outcome.StoreErrorKind(e.Err)
	}
	level, s := l.level, b.deny
	if kind != "" {
		level, s = l.errLevel, b.fail
	}
	ctx := context.Background()
	if !l.logger.Enabled(ctx, level) {
		return
	}
	if !s.take(l.clock(), l.rate) {
		s.dropped.Add(1)
		return
	}
	l.write(ctx, e, oc, level, kind, s.dropped.Swap(0))
}

// clock returns the sampling time, in ns since the epoch.
func (l *Logger) clock() int64 {
	if l.now == nil {
		return int64(time.Since(l.epoch))
	}
	return int64(l.now().Sub(l.epoch))
}

// write writes the record of e.
func (l *Logger) write(ctx context.Context, e core.Event, oc outcome.Outcome, level slog.Level, kind string, suppressed int64) {
	var buf [11]slog.Attr
	attrs := append(buf[:0],
		slog.String("limit", e.Policy.Name),
		slog.String("outcome", oc.String()),
		slog.Int64("cost", e.Cost),
		slog.Int64("remaining", e.Decision.Remaining),
		slog.Duration("retry_after", e.Decision.RetryAfter),
		slog.String("source", e.Decision.Source.String()),
	)
	key, plain, ok := l.keyAttr(e.Key)
	if ok {
		attrs = append(attrs, key)
	}
	if kind != "" {
		attrs = append(attrs, slog.String("error_kind", kind))
	}
	if e.Err != nil {
		text := e.Err.Error()
		if !plain && e.Key != "" {
			text = strings.ReplaceAll(text, e.Key, "[key]")
		}
		attrs = append(attrs, slog.String("error", text))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	l.logger.LogAttrs(ctx, level, message(oc, kind), attrs...)
}

// message returns a record's message.
func message(oc outcome.Outcome, kind string) string {
	switch {
	case kind != "":
		return "rate limit: store failed"
	case oc == outcome.Denied, oc == outcome.DenyCache,
		oc == outcome.FallbackDenied, oc == outcome.FailedClosed,
		oc == outcome.LockedOut:
		return "rate limit: request denied"
	case oc == outcome.ShadowDenied:
		return "rate limit: request would have been denied (shadow mode)"
	case oc == outcome.Allowed:
		return "rate limit: request allowed"
	case oc == outcome.Canceled:
		return "rate limit: request canceled"
	case oc == outcome.Invalid:
		return "rate limit: request invalid"
	}
	return "rate limit: request " + oc.String()
}
