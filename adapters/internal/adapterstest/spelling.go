package adapterstest

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
)

// RunSpelling checks, on the bytes a real socket carries, that every
// rate-limit field goes on the wire once, under its canonical name
// ("X-Ratelimit-Limit", "Ratelimit-Policy"): the name under which
// net/http's and fasthttp's header maps hold it, so that a handler's
// Header().Get finds it (field names are case-insensitive on the wire).
func RunSpelling(t *testing.T, h SocketHarness) {
	all := headers.Config{XRateLimit: true, Draft6: true, Structured: true, RetryAfter: true}
	m := NewMount(t, clockstore.At(NewStore(t), T0), httplimit.Layer{Policy: fixed("spelled", 1)}, nil, httplimit.WithHeaders(all))
	spec := &Spec{Global: []Mount{m}, Routes: []Route{{Method: "GET", Path: "/"}}}
	addr := h.Serve(t, spec)
	for i, want := range []int{200, 429} {
		names := rawFieldNames(t, addr)
		for _, f := range spelledFields {
			if f == "Retry-After" && want == 200 {
				assert.NotContains(t, names, f, "request %d", i)
				continue
			}
			c := canonical(f)
			assert.Equal(t, 1, count(names, c), "request %d: %s, once, in %v", i, c, names)
			if c != f {
				assert.NotContains(t, names, f, "request %d: a name not canonical on the wire", i)
			}
		}
	}
}

// spelledFields are every field the flow may write, as the standards
// spell them.
var spelledFields = []string{
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
	"RateLimit", "RateLimit-Policy", "Retry-After",
}

// rawFieldNames sends GET / and returns the field names of the response
// as they came over the socket.
func rawFieldNames(t *testing.T, addr string) []string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioGuard)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(ioGuard)))
	_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(status, "HTTP/1.1 "), status)
	var names []string
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			return names
		}
		name, _, ok := strings.Cut(line, ":")
		require.True(t, ok, line)
		names = append(names, name)
	}
}

func count(names []string, name string) int {
	n := 0
	for _, s := range names {
		if s == name {
			n++
		}
	}
	return n
}

// canonical is net/http's canonical form of a field name.
func canonical(name string) string {
	b := []byte(strings.ToLower(name))
	up := true
	for i, c := range b {
		if up && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		up = c == '-'
	}
	return string(b)
}
