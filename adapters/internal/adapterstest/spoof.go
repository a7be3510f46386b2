package adapterstest

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/keyfuncs"
)

// forged are the headers that clients send to pass for someone else.
var forged = []http.Header{
	{"X-Forwarded-For": {"203.0.113.50"}},
	{"X-Forwarded-For": {"203.0.113.51, 203.0.113.52"}},
	{"X-Real-Ip": {"203.0.113.53"}},
	{"True-Client-Ip": {"203.0.113.54"}},
	{"Cf-Connecting-Ip": {"203.0.113.55"}},
	{"Forwarded": {"for=203.0.113.56"}},
	{"Fly-Client-Ip": {"203.0.113.57"}, "X-Client-Ip": {"203.0.113.58"}},
}

type spoofStep struct {
	peer   string
	header http.Header
	status int
}

type spoofCase struct {
	name  string
	opts  []keyfuncs.IPOption
	steps []spoofStep
	// forwardWarn: the Flow's ClientIP trusts no proxy and meets
	// X-Forwarded-For, which it reports in one Warn record on
	// slog.Default (see keyfuncs.ClientIP).
	forwardWarn bool
}

var spoofCases = []spoofCase{
	{
		name: "default ignores every forwarding header",
		steps: func() []spoofStep {
			steps := []spoofStep{{peer: "192.0.2.10:1000", status: 200}}
			for _, h := range forged {
				steps = append(steps, spoofStep{peer: "192.0.2.10:1001", header: h, status: 429})
			}
			return append(steps, spoofStep{peer: "192.0.2.11:1000", header: forged[0], status: 200})
		}(),
		forwardWarn: true,
	},
	{
		name: "trusted proxies: the right client, forged entries ignored",
		opts: []keyfuncs.IPOption{keyfuncs.TrustedProxies("10.0.0.0/8")},
		steps: []spoofStep{
			{peer: "10.0.0.1:1000", header: http.Header{"X-Forwarded-For": {"198.51.100.1"}}, status: 200},
			// The same client through another proxy.
			{peer: "10.0.0.2:1000", header: http.Header{"X-Forwarded-For": {"198.51.100.1"}}, status: 429},
			// Forged entries left of the client, and trusted hops right of it.
			{peer: "10.0.0.1:1000", header: http.Header{"X-Forwarded-For": {"203.0.113.99, 198.51.100.1"}}, status: 429},
			{peer: "10.0.0.1:1000", header: http.Header{"X-Forwarded-For": {"203.0.113.98, 198.51.100.1, 10.1.2.3"}}, status: 429},
			{peer: "10.0.0.1:1000", header: http.Header{"X-Forwarded-For": {"203.0.113.97", "198.51.100.1"}}, status: 429},
			// Other headers still mean nothing.
			{peer: "10.0.0.1:1000", header: http.Header{"X-Forwarded-For": {"198.51.100.1"}, "X-Real-Ip": {"203.0.113.1"}, "True-Client-Ip": {"203.0.113.2"}}, status: 429},
			// Another client behind the proxies.
			{peer: "10.0.0.1:1000", header: http.Header{"X-Forwarded-For": {"198.51.100.2"}}, status: 200},
			// An untrusted peer is the client, whatever it claims.
			{peer: "198.51.100.3:1000", header: http.Header{"X-Forwarded-For": {"198.51.100.1"}}, status: 200},
			{peer: "198.51.100.3:1001", header: http.Header{"X-Forwarded-For": {"198.51.100.4"}}, status: 429},
		},
	},
	{
		name: "IPv6 peers in one /56 share",
		steps: []spoofStep{
			{peer: "[2001:db8:1:100::1]:1000", status: 200},
			{peer: "[2001:db8:1:1ff:ffff::2]:1000", status: 429},
			{peer: "[2001:db8:1:200::1]:1000", status: 200},
		},
	},
	{
		name: "IPv4-mapped and IPv4 share",
		steps: []spoofStep{
			{peer: "[::ffff:192.0.2.20]:1000", status: 200},
			{peer: "192.0.2.20:1001", status: 429},
			{peer: "192.0.2.21:1000", status: 200},
			{peer: "[::ffff:192.0.2.21]:1001", status: 429},
		},
	},
}

// RunSpoofing checks that clients are who the socket (and trusted proxies
// only) say they are: one request per client, limit 1. A ClientIP that
// trusts no proxy reports the forwarding headers it meets in one Warn
// record on slog.Default, naming the header and neither its value nor an
// address; one that trusts proxies reports nothing.
func RunSpoofing(t *testing.T, h Harness) {
	for _, tc := range spoofCases {
		t.Run(tc.name, func(t *testing.T) {
			logs := new(logRecorder)
			prev := slog.Default()
			slog.SetDefault(slog.New(logs))
			t.Cleanup(func() { slog.SetDefault(prev) })
			clientIP, err := keyfuncs.NewClientIP(tc.opts...)
			require.NoError(t, err)
			ly := httplimit.Layer{Policy: fixed("global", 1)}
			if tc.opts != nil {
				ly.Key = clientIP.Key
			}
			spec := globalLayer(t, clockstore.At(NewStore(t), T0), ly, nil)
			app := h.Build(t, spec)
			for i, s := range tc.steps {
				res := app.Do(t, Request{Method: "GET", Path: "/", RemoteAddr: s.peer, Header: s.header})
				assert.Equal(t, s.status, res.Status, "step %d: peer %s, header %v: status", i, s.peer, s.header)
			}
			var warns []logRecord
			for _, r := range logs.all() {
				if r.level >= slog.LevelWarn {
					warns = append(warns, r)
				}
			}
			if !tc.forwardWarn {
				assert.Empty(t, warns, "no Warn record")
				return
			}
			require.Len(t, warns, 1, "one Warn record for every forwarding header: %+v", warns)
			assert.Contains(t, warns[0].msg, "keyfuncs.TrustedProxies")
			assert.Equal(t, map[string]string{"header": "X-Forwarded-For"}, warns[0].attrs, "the header's name, not its value")
			for _, s := range tc.steps {
				assert.NotContains(t, warns[0].msg, strings.Split(s.peer, ":")[0], "never an address")
			}
		})
	}
}
