package adapterstest

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/internal/testkit/limitertest"
	"github.com/apigate/ratelimit/keyfuncs"
)

// ForbiddenBody is DefaultResponder's body for a deny-listed request.
const ForbiddenBody = `{"error":"forbidden","message":"Access denied."}`

// accessStep is one request on a socket of its own, and what must come of
// it.
type accessStep struct {
	name   string
	header http.Header
	status int
	// limited: the response carries the rate-limit headers, and the store
	// was asked; otherwise it carries none and the store was not asked.
	limited bool
}

// accessCase is a server with allow and deny lists, and the requests sent
// to it. Every peer is 127.0.0.1, the only loopback address a test can
// dial from: who the client is depends on the trust model and the headers.
type accessCase struct {
	name    string
	proxies []string // TrustedProxies; none: the socket peer is the client
	allow   []string
	deny    []string
	userKey bool // the key is "user:" + X-User when present, else the IP key
	steps   []accessStep
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// forgedAs are the headers a client sends to pass for addr.
func forgedAs(addr string) []http.Header {
	return []http.Header{
		hdr("X-Forwarded-For", addr),
		hdr("X-Forwarded-For", addr+", "+addr),
		hdr("X-Real-IP", addr),
		hdr("True-Client-IP", addr),
		hdr("CF-Connecting-IP", addr),
		hdr("Forwarded", "for="+addr),
		hdr("Forwarded", `for="[::ffff:`+addr+`]"`),
	}
}

var accessCases = []accessCase{
	{
		name:  "forged headers do not reach the allow list",
		allow: []string{"198.51.100.0/24", "::ffff:198.51.100.0/120"},
		steps: func() []accessStep {
			steps := []accessStep{{name: "first", status: 200, limited: true}}
			for _, h := range forgedAs("198.51.100.1") {
				steps = append(steps, accessStep{name: "forged " + h.Get("X-Forwarded-For") + h.Get("Forwarded"), header: h, status: 429, limited: true})
			}
			return steps
		}(),
	},
	{
		name: "forged headers do not escape the deny list",
		deny: []string{"127.0.0.1"},
		steps: func() []accessStep {
			steps := []accessStep{{name: "plain", status: 403}}
			for _, h := range forgedAs("198.51.100.1") {
				steps = append(steps, accessStep{name: "forged", header: h, status: 403})
			}
			return steps
		}(),
	},
	{
		name:    "behind trusted proxies the client's own hop is listed",
		proxies: []string{"127.0.0.0/8"},
		allow:   []string{"198.51.100.0/24"},
		deny:    []string{"203.0.113.0/24", "2001:db8::/32"},
		steps: []accessStep{
			{name: "allowed client", header: hdr("X-Forwarded-For", "198.51.100.1"), status: 200},
			{name: "allowed client again", header: hdr("X-Forwarded-For", "198.51.100.1"), status: 200},
			{name: "forged allowed entry left of a denied client", header: hdr("X-Forwarded-For", "198.51.100.1, 203.0.113.9"), status: 403},
			{name: "forged allowed entry on another line", header: hdr("X-Forwarded-For", "198.51.100.1", "X-Forwarded-For", "203.0.113.9"), status: 403},
			{name: "denied client's forged entry left of it", header: hdr("X-Forwarded-For", "203.0.113.9, 198.51.100.2"), status: 200},
			{name: "denied IPv6 client", header: hdr("X-Forwarded-For", "2001:db8:5::1"), status: 403},
			{name: "denied client, IPv4-mapped", header: hdr("X-Forwarded-For", "::ffff:203.0.113.9"), status: 403},
			{name: "other header ignored", header: hdr("X-Forwarded-For", "192.0.2.5", "X-Real-IP", "198.51.100.1"), status: 200, limited: true},
			{name: "listed nowhere, limited", header: hdr("X-Forwarded-For", "192.0.2.5"), status: 429, limited: true},
			{name: "garbage ends the walk at the proxy", header: hdr("X-Forwarded-For", "198.51.100.1, nonsense"), status: 200, limited: true},
		},
	},
	{
		name:    "allow wins over deny",
		proxies: []string{"127.0.0.0/8"},
		allow:   []string{"203.0.113.7"},
		deny:    []string{"203.0.113.0/24"},
		steps: []accessStep{
			{name: "allowed inside the denied range", header: hdr("X-Forwarded-For", "203.0.113.7"), status: 200},
			{name: "its neighbour", header: hdr("X-Forwarded-For", "203.0.113.8"), status: 403},
		},
	},
	{
		name:    "client keys",
		userKey: true,
		allow:   []string{"user:7"},
		deny:    []string{"user:42"},
		steps: []accessStep{
			{name: "denied user", header: hdr("X-User", "42"), status: 403},
			{name: "allowed user", header: hdr("X-User", "7"), status: 200},
			{name: "allowed user again", header: hdr("X-User", "7"), status: 200},
			{name: "another user", header: hdr("X-User", "8"), status: 200, limited: true},
			{name: "that user again", header: hdr("X-User", "8"), status: 429, limited: true},
		},
	},
}

// RunAccess checks, over real sockets, that allow and deny lists see the
// client the limiter sees: forged forwarding headers move nobody onto an
// allow list or off a deny list; allow-listed and deny-listed requests
// cost no store call and carry no rate-limit header; deny answers 403.
func RunAccess(t *testing.T, h SocketHarness) {
	for _, tc := range accessCases {
		t.Run(tc.name, func(t *testing.T) {
			var ipOpts []keyfuncs.IPOption
			if tc.proxies != nil {
				ipOpts = append(ipOpts, keyfuncs.TrustedProxies(tc.proxies...))
			}
			client, err := keyfuncs.NewClientIP(ipOpts...)
			require.NoError(t, err)
			opts := []httplimit.Option{httplimit.WithClientIP(client)}
			ly := httplimit.Layer{Policy: fixed("global", 1)}
			if tc.userKey {
				ly.Key = func(r keyfuncs.Request) (string, error) {
					if u := r.Header("X-User"); u != "" {
						return "user:" + u, nil
					}
					return client.Key(r)
				}
			}
			if tc.allow != nil {
				opts = append(opts, httplimit.WithAllowList(mustList(t, tc.allow)))
			}
			if tc.deny != nil {
				opts = append(opts, httplimit.WithDenyList(mustList(t, tc.deny)))
			}
			store := &limitertest.Counting{Store: clockstore.At(NewStore(t), T0)}
			spec := globalLayer(t, store, ly, nil, opts...)
			addr := h.Serve(t, spec)
			var hits int64
			for i, s := range tc.steps {
				before := store.Takes()
				res := Send(t, addr, RawRequest{Header: s.header})
				require.Equal(t, s.status, res.Status, "step %d (%s): %v: body %s", i, s.name, s.header, res.Body)
				if s.status == 200 {
					hits++
				}
				if s.status == 403 {
					assert.Equal(t, ForbiddenBody, res.Body, "step %d", i)
					assert.Contains(t, res.Header.Get("Content-Type"), "application/json", "step %d", i)
				}
				asked := store.Takes() - before
				if s.limited {
					assert.Equal(t, int64(1), asked, "step %d (%s): store calls", i, s.name)
					assert.NotEmpty(t, res.Header.Get("X-RateLimit-Limit"), "step %d (%s)", i, s.name)
				} else {
					assert.Zero(t, asked, "step %d (%s): a listed client costs no store call", i, s.name)
					for _, f := range rateFields {
						assert.Empty(t, res.Header.Values(f), "step %d (%s): %s on a listed client", i, s.name, f)
					}
				}
			}
			assert.Equal(t, hits, spec.Hits(), "handler runs")
		})
	}
}

func mustList(t testing.TB, lines []string) *access.List {
	t.Helper()
	es := make([]access.Entry, 0, len(lines))
	for _, l := range lines {
		e, err := access.ParseEntry(l)
		require.NoError(t, err, l)
		es = append(es, e)
	}
	l, err := access.NewList(es...)
	require.NoError(t, err)
	return l
}
