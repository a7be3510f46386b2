package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/redistest"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server)
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return client, server
}

// TestBusyConnReads: a busy-polling connection reads what was sent,
// whether it was there before the read or came during its spin or after
// it, reports the end of the stream as io.EOF, and a read deadline as a
// timeout, within the deadline and the spin.
func TestBusyConnReads(t *testing.T) {
	raw, peer := tcpPair(t)
	conn := busyPoll(raw, 200*time.Microsecond)
	require.IsType(t, &busyConn{}, conn)
	buf := make([]byte, 64)

	// There before the read.
	_, err := peer.Write([]byte("+OK\r\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := conn.Read(buf)
		require.NoError(t, err)
		return string(buf[:n]) == "+OK\r\n"
	}, time.Second, time.Millisecond)

	// Sent while the read spins, or after it parked.
	for _, after := range []time.Duration{50 * time.Microsecond, 20 * time.Millisecond} {
		go func() {
			time.Sleep(after)
			_, _ = peer.Write([]byte(":1\r\n"))
		}()
		n, err := io.ReadAtLeast(conn, buf, 4)
		require.NoError(t, err)
		assert.Equal(t, ":1\r\n", string(buf[:n]), "sent %v after the read began", after)
	}

	// A deadline ends a read that nothing answers, as a timeout.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Millisecond)))
	start := time.Now()
	_, err = conn.Read(buf)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded))
	assert.Less(t, time.Since(start), time.Second)
	require.NoError(t, conn.SetReadDeadline(time.Time{}))

	// The end of the stream.
	require.NoError(t, peer.Close())
	_, err = conn.Read(buf)
	require.ErrorIs(t, err, io.EOF)
}

// TestBusyConnBacksOff: a connection whose spins keep running out with
// nothing to read stops spinning for busySkip reads, then tries again; a
// spin that finds a reply clears the count.
func TestBusyConnBacksOff(t *testing.T) {
	raw, peer := tcpPair(t)
	conn := busyPoll(raw, 20*time.Microsecond).(*busyConn)
	buf := make([]byte, 8)
	late := func() {
		go func() {
			time.Sleep(5 * time.Millisecond) // well after the spin: it runs out
			_, _ = peer.Write([]byte("x"))
		}()
		_, err := conn.Read(buf)
		require.NoError(t, err)
	}
	for i := 1; i < busyMisses; i++ {
		late()
		require.Equal(t, uint8(i), conn.misses)
		require.Zero(t, conn.skip)
	}
	late()
	assert.Zero(t, conn.misses)
	assert.Equal(t, uint16(busySkip), conn.skip, "spinning stopped")
	late()
	assert.Equal(t, uint16(busySkip-1), conn.skip)

	conn.skip = 0
	conn.misses = busyMisses - 1
	_, err := peer.Write([]byte("y"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return conn.await() }, time.Second, time.Millisecond)
	_, err = conn.Read(buf)
	require.NoError(t, err)
	assert.Zero(t, conn.misses, "a spin that found a reply clears the count")
}

// TestBusyPollWrapsSocketsOnly: TLS connections (whose reads are the TLS
// layer's), other net.Conn values, and a zero spin are left as they are.
func TestBusyPollWrapsSocketsOnly(t *testing.T) {
	raw, _ := tcpPair(t)
	assert.Same(t, raw, busyPoll(raw, 0))
	tc := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // never handshakes
	assert.Same(t, tc, busyPoll(tc, time.Millisecond))
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	assert.Same(t, a, busyPoll(a, time.Millisecond))
}

// TestDirectClientBusyPolls: a Store's lone decisions run over busy
// polling connections by default (on a machine of more than one CPU),
// over plain ones with WithBusyPoll(0),
// both dialed by the client's own dialer, and decide the same; an
// out-of-range WithBusyPoll is refused.
func TestDirectClientBusyPolls(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		opts []Option
		busy bool
	}{{nil, true}, {[]Option{WithBusyPoll(0)}, false}, {[]Option{WithBusyPoll(time.Millisecond)}, true}} {
		client := redis.NewClient(srv.Options())
		t.Cleanup(func() { _ = client.Close() })
		var dials atomic.Int32
		client.Options().Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		s := mustNew(t, client, append([]Option{WithPrefix(testPrefix(t))}, tc.opts...)...)
		t.Cleanup(func() { _ = s.Close() })
		o := s.batch.direct.Options()
		conn, err := o.Dialer(context.Background(), o.Network, o.Addr)
		require.NoError(t, err)
		_, busy := conn.(*busyConn)
		// With one CPU (taskset -c 0), a Store never polls.
		assert.Equal(t, tc.busy && runtime.NumCPU() > 1, busy, "%v, %d CPUs", tc.opts, runtime.NumCPU())
		require.NoError(t, conn.Close())

		l, err := core.NewLimiter(s, core.Policy{Name: "busy", Algorithm: core.TokenBucket, Limit: 3, Window: time.Hour})
		require.NoError(t, err)
		admitted := 0
		for range 5 {
			d, err := l.Allow(context.Background(), "k")
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			}
		}
		assert.Equal(t, 3, admitted)
		assert.Positive(t, dials.Load(), "dialed by the client's dialer")
	}
	for _, d := range []time.Duration{-time.Nanosecond, maxBusyPoll + time.Nanosecond} {
		_, err := New(redis.NewClient(srv.Options()), WithBusyPoll(d))
		require.ErrorIs(t, err, core.ErrInvalidOption, d)
	}
}
