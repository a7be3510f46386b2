package redisstore

import (
	"net"
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

// busyConn is a connection of a Store's own pool for lone decisions (see
// batcher.alone) whose reads, when no byte of the reply has arrived yet,
// poll the socket for up to spin before they park the goroutine in the
// network poller. On loopback or a fast LAN a reply comes back within tens
// of microseconds, about as long as parking and waking a goroutine takes,
// so that a lone decision waits less; the spin yields to any goroutine
// that is ready to run. A read that still had nothing after spin parks as
// usual, and a connection whose spins keep coming to nothing (a slow
// network, a busy Redis) stops spinning for a while.
//
// A busyConn is used by one goroutine at a time, as a pooled connection
// is; its deadlines are the connection's, checked before the spin (a spin
// may outlast a deadline by at most spin).
type busyConn struct {
	net.Conn
	raw    syscall.RawConn
	spin   time.Duration
	misses uint8  // spins in a row that ran out with nothing to read
	skip   uint16 // reads left to park without spinning
	// poll is c.pollSocket, made once: a func literal handed to
	// raw.Read would be three allocations a read.
	poll  func(fd uintptr) bool
	ready bool // the last poll found something to read
}

// busyMisses is how many spins in a row may run out before a connection
// parks its next busySkip reads without spinning.
const (
	busyMisses = 4
	busySkip   = 256
)

// busyPoll wraps conn, a connection over a socket (TCP or Unix: TLS is
// left as it is, its reads being the TLS layer's), to spin as busyConn
// says; spin <= 0 returns conn.
func busyPoll(conn net.Conn, spin time.Duration) net.Conn {
	sc, ok := conn.(syscall.Conn)
	if spin <= 0 || !ok {
		return conn
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return conn
	}
	c := &busyConn{Conn: conn, raw: raw, spin: spin}
	c.poll = c.pollSocket
	return c
}

// Read reads from the connection, spinning first as busyConn says.
func (c *busyConn) Read(b []byte) (int, error) {
	if len(b) > 0 && c.spins() {
		c.count(c.await())
	}
	return c.Conn.Read(b)
}

// spins reports whether the next read is to spin, counting down the
// reads to park without spinning.
func (c *busyConn) spins() bool {
	if c.skip > 0 {
		c.skip--
		return false
	}
	return true
}

// count records a spin that found something to read, or ran out: after
// busyMisses that ran out in a row, the next busySkip reads park at once.
func (c *busyConn) count(found bool) {
	if found {
		c.misses = 0
		return
	}
	if c.misses++; c.misses >= busyMisses {
		c.misses, c.skip = 0, busySkip
	}
}

// await polls the socket until it has something to read (a byte, the end
// of the stream or an error, each of which Read then reports) or spin has
// passed, and reports whether it had.
func (c *busyConn) await() bool {
	c.ready = false
	_ = c.raw.Read(c.poll)
	return c.ready
}

// pollSocket is await's poll of the socket fd, under raw.Read: it always
// reports done, having set c.ready or run out of spin.
func (c *busyConn) pollSocket(fd uintptr) bool {
	var b byte
	var start time.Time
	for i := 0; ; i++ {
		// unsafe: the raw syscall, for syscall.Recvfrom, the safe one, also
		// asks for the peer's address, which a Unix socket gives and it
		// allocates: 266 against 440 CPU-ns/op and 0 against 2 allocs/op
		// on a Unix socket, 241 against 268 on TCP (go test -run '^$'
		// -bench PollSocket ./core/redisstore, median of 6 alternating
		// runs, 2026-12-07).
		_, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b)), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if errno != syscall.EAGAIN && errno != syscall.EINTR {
			c.ready = true
			return true
		}
		if i == 0 {
			start = time.Now()
		} else if time.Since(start) >= c.spin {
			return true
		}
		runtime.Gosched()
	}
}
