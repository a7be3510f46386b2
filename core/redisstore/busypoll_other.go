//go:build !linux

package redisstore

import (
	"net"
	"time"
)

// busyPoll returns conn: connections spin before they park on Linux only.
func busyPoll(conn net.Conn, _ time.Duration) net.Conn { return conn }
