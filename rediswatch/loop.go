package rediswatch

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/apigate/ratelimit/core"
)

// pollTimeout bounds one read of Redis by a poll.
const pollTimeout = time.Second

// loop is the part of watching a Redis key that Bans and Overrides
// share: a goroutine that polls every interval until Close, and the
// outage, logged once when polls start failing and once when one succeeds
// again. The watcher's poll function does the reading, under the
// watcher's own locks.
type loop struct {
	ctx       context.Context // canceled by Close
	cancel    context.CancelFunc
	done      chan struct{} // closed when the goroutine has returned
	closeOnce sync.Once

	mu   sync.Mutex // guards down
	down bool       // the last poll failed
}

// start runs poll every interval on a goroutine of its own, with a ctx
// that Close cancels, until Close.
func (l *loop) start(every time.Duration, poll func(ctx context.Context)) {
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.done = make(chan struct{})
	go func() {
		defer close(l.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-l.ctx.Done():
				return
			case <-t.C:
				poll(l.ctx)
			}
		}
	}()
}

// closed reports whether Close has been called.
func (l *loop) closed() bool { return l.ctx.Err() != nil }

// report notes how a read of Redis went (err nil: it went well) and logs
// an outage of Redis when it starts and when it ends, once each; nothing
// while closing. what names the data ("bans"); count says how much is
// held, and attrs are more attributes of both lines.
func (l *loop) report(err error, log *slog.Logger, what string, count int, attrs ...any) {
	if err != nil && l.closed() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil && !l.down:
		l.down = true
		log.Error("rediswatch: cannot read the "+what+" from Redis; keeping the last good ones",
			append(attrs, slog.Int(what, count), slog.Any("error", err))...)
	case err == nil && l.down:
		l.down = false
		log.Info("rediswatch: reading the "+what+" from Redis again", append(attrs, slog.Int(what, count))...)
	}
}

// stop cancels the goroutine and waits for it to return; it may be
// called more than once.
func (l *loop) stop() {
	l.closeOnce.Do(func() {
		l.cancel()
		<-l.done
	})
}

// checkClient refuses a nil client, or a typed nil pointer in one.
func checkClient(fn string, client any) error {
	if client == nil {
		return fmt.Errorf("%w: rediswatch.%s: nil client", core.ErrInvalidOption, fn)
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		return fmt.Errorf("%w: rediswatch.%s: nil %T", core.ErrInvalidOption, fn, client)
	}
	return nil
}

// clip quotes s for a log line or an error, cut to 64 bytes.
func clip(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}
