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
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/internal/testkit/testwait"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	return socketPair(t, "tcp", "127.0.0.1:0")
}

// socketPair returns the two ends of a connection to a listener on
// network and address.
func socketPair(t testing.TB, network, address string) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, address)
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial(network, ln.Addr().String())
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
	assert.Less(t, time.Since(start), testwait.D(time.Second))
	require.NoError(t, conn.SetReadDeadline(time.Time{}))

	// The end of the stream.
	require.NoError(t, peer.Close())
	_, err = conn.Read(buf)
	require.ErrorIs(t, err, io.EOF)
}

// TestBusyConnBacksOff: a spin over a socket with nothing to read runs
// out after its spin and says so, one with a byte waiting finds it at
// once; after busyMisses spins in a row that ran out, the next busySkip
// reads park without spinning, then spinning resumes; a spin that found a
// reply clears the count.
func TestBusyConnBacksOff(t *testing.T) {
	raw, peer := tcpPair(t)
	const spin = 2 * time.Millisecond
	conn := busyPoll(raw, spin).(*busyConn)

	start := time.Now()
	require.False(t, conn.await(), "nothing was sent")
	assert.GreaterOrEqual(t, time.Since(start), spin, "it spun for its spin")
	_, err := peer.Write([]byte("x"))
	require.NoError(t, err)
	require.Eventually(t, conn.await, testwait.D(time.Second), time.Millisecond, "the byte sent")

	for i := 1; i < busyMisses; i++ {
		require.True(t, conn.spins())
		conn.count(false)
		require.Equal(t, uint8(i), conn.misses)
	}
	require.True(t, conn.spins())
	conn.count(false)
	assert.Zero(t, conn.misses)
	for i := range busySkip {
		require.False(t, conn.spins(), "read %d of the back-off parks at once", i)
	}
	require.True(t, conn.spins(), "then spinning resumes")
	conn.count(false)
	conn.count(true)
	assert.Zero(t, conn.misses, "a spin that found a reply clears the count")

	// Through Read: the byte waiting is read, after a spin that found it.
	buf := make([]byte, 8)
	n, err := conn.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "x", string(buf[:n]))
	assert.Zero(t, conn.misses)
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

		l, err := core.NewLimiter(alone(s), []core.Policy{{Name: "busy", Algorithm: core.TokenBucket, Limit: 3, Window: time.Hour}})
		require.NoError(t, err)
		admitted := 0
		for range 5 {
			d, err := l.AllowN(context.Background(), "k", 1, time.Time{})
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

// TestBusyConnReadAllocatesNothing: a read that spins allocates nothing
// (its poll is made once per connection, not per read).
func TestBusyConnReadAllocatesNothing(t *testing.T) {
	raw, peer := tcpPair(t)
	conn := busyPoll(raw, time.Millisecond)
	out, in := []byte("x"), make([]byte, 8)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := peer.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, in[:1]); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}
