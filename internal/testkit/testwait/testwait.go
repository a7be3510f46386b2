// Package testwait is the one source of every deadline a test waits on
// real time for: a socket to answer, a goroutine to finish, a watcher to
// see a change. A busy machine runs everything slower, so each deadline is
// scaled by RATELIMIT_TEST_TIMESCALE (a positive number, default 1; the
// README's test section documents it): a test asks for the time it needs
// on a quiet machine, and a slow one gets proportionally more.
//
// What a test measures (a timeout under test, a pacing delay) is not a
// deadline and is not scaled; only how long a test is willing to wait for
// something that will happen.
package testwait

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Env is the environment variable that scales every deadline.
const Env = "RATELIMIT_TEST_TIMESCALE"

var scale = sync.OnceValue(func() float64 {
	v := os.Getenv(Env)
	if v == "" {
		return 1
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || f > 1000 {
		panic(fmt.Sprintf("testwait: %s=%q is not a number in (0, 1000]", Env, v))
	}
	return f
})

// Scale returns the factor every deadline is multiplied by.
func Scale() float64 { return scale() }

// D returns d scaled for this machine: the deadline for something that
// takes at most d on a quiet one.
func D(d time.Duration) time.Duration {
	return time.Duration(float64(d) * scale())
}

// Deadline returns the time, from now, by which something that takes at
// most d on a quiet machine must have happened.
func Deadline(d time.Duration) time.Time { return time.Now().Add(D(d)) }

// For polls cond every tick until it returns true, and fails the test
// with msg (and its args, as fmt.Sprintf's) if it has not within D(d).
func For(t testing.TB, d, tick time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	end := Deadline(d)
	for {
		if cond() {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("not within %v (%v scaled by %s=%g): %s", D(d), d, Env, scale(), fmt.Sprintf(msg, args...))
		}
		time.Sleep(tick)
	}
}

// Done waits for ch to be closed or to deliver, and fails the test with
// msg if it has not within D(d).
func Done[T any](t testing.TB, ch <-chan T, d time.Duration, msg string, args ...any) T {
	t.Helper()
	timer := time.NewTimer(D(d))
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("not within %v (%v scaled by %s=%g): %s", D(d), d, Env, scale(), fmt.Sprintf(msg, args...))
	}
	var zero T
	return zero
}
