package rediswatch

import (
	"context"
	"time"
)

// WithClock makes a Bans read this server's time from now, for tests.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		c.now = now
		return nil
	}
}

// WithPageHook makes a Bans call f after each page a load reads, for
// tests.
func WithPageHook(f func()) Option {
	return func(c *config) error {
		c.page = f
		return nil
	}
}

// WithResyncInterval is withResyncInterval, for tests.
var WithResyncInterval = withResyncInterval

// Reload loads every ban in full now, as the poller does every resync
// interval, for benchmarks.
func Reload(ctx context.Context, b *Bans) error { return b.reload(ctx) }

// WriteBack writes back what b holds into a Redis that lost its data,
// as a Ban that finds the marker gone does first, for benchmarks.
func WriteBack(ctx context.Context, b *Bans) error { return b.recoverLost(ctx) }

// Len returns how many bans the snapshot of b holds, expired ones not yet
// dropped included.
func Len(b *Bans) int { return b.view.Load().len() }

// Reads returns how many read scripts w has run.
func (w *Overrides) Reads() int64 { return w.reads.Load() }

// Marker returns the marker key of w.
func (w *Overrides) Marker() string { return w.marker }

// MarkerOf is markerOf.
var MarkerOf = markerOf

// The errors of Overrides, for tests.
var (
	ErrTooManyFields = errTooManyFields
	ErrClosed        = errClosed
)

// The default keys and poll interval, for tests.
var (
	DefaultPrefix                = bansKind.key
	DefaultOverridesKey          = overridesKind.key
	DefaultOverridesPollInterval = overridesKind.poll
)

// Sync brings b's snapshot up to date with Redis now, as the poller does
// every poll interval (catching up, or reloading when it must), and
// returns Redis's error if it cannot, for tests that do not wait for a
// poll.
func (b *Bans) Sync(ctx context.Context) error {
	full, err := b.catchUp(ctx)
	if err == nil && full {
		err = b.reload(ctx)
	}
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.pruneLocked(b.cfg.now())
	b.mu.Unlock()
	return nil
}

// Sync reads w's hash now, as the goroutine does every poll interval,
// and returns once the overrides in force are what it read, or the
// read's error (ErrTooManyFields, ErrClosed after Close), for tests that
// do not wait for a poll.
func (w *Overrides) Sync(ctx context.Context) error {
	if w.loop.closed() {
		return errClosed
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pollLocked(ctx)
}
