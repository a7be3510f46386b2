package chilimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	chilimit "github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/redisstore"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/redistest"
	"github.com/apigate/ratelimit/keyfuncs"
)

// TestClusterDeniedLoginFloodKeepsGlobalQuota is the attack of a denied
// flood, from outside: two app servers on real sockets, each a chi router
// with layered limits over a real 3-master Redis Cluster (a default
// ClusterClient each): a global layer of 100 and a login layer of 5 per
// address with a lockout. A client spends its 5 logins, then sends 300
// more at once, half to each server, all denied (and locked out), while
// 50 other requests pass. The global layer is left with exactly 100 less
// what was admitted: the next 45 requests pass, and the 46th is refused.
func TestClusterDeniedLoginFloodKeepsGlobalQuota(t *testing.T) {
	cl := redistest.StartCluster(t)
	prefix := fmt.Sprintf("flood-%d-", time.Now().UnixNano())
	for _, alg := range []core.Algorithm{core.SlidingWindowLog, core.FixedWindow} {
		t.Run(string(alg), func(t *testing.T) {
			clientIP, err := keyfuncs.NewClientIP()
			require.NoError(t, err)
			ip := clientIP.Key
			global, err := keyfuncs.Static("api")
			require.NoError(t, err)
			layers := []httplimit.Layer{
				{Key: global, Policy: core.Policy{Name: "global", Algorithm: alg, Limit: 100, Window: time.Hour}},
				{Key: ip, Methods: []string{"POST"}, Routes: []string{"/login"},
					Policy: core.Policy{Name: "login", Algorithm: alg, Limit: 5, Window: time.Hour, Lockout: time.Minute}},
			}
			var servers []*httptest.Server
			var handled atomic.Int64
			for range 2 {
				// Generous: this test is about what is charged, not a timeout.
				store, err := redisstore.New(cl.Client(), redisstore.WithPrefix(prefix+string(alg)), redisstore.WithTimeout(10*time.Second))
				require.NoError(t, err)
				t.Cleanup(func() { _ = store.Close() })
				f, err := httplimit.New(store, layers)
				require.NoError(t, err)
				mw := chilimit.New(f)
				srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					handled.Add(1)
					w.WriteHeader(http.StatusOK)
				})))
				t.Cleanup(srv.Close)
				servers = append(servers, srv)
			}
			client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			t.Cleanup(client.CloseIdleConnections)
			send := func(srv *httptest.Server, method, path string) int {
				req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(""))
				require.NoError(t, err)
				resp, err := client.Do(req)
				require.NoError(t, err)
				_ = resp.Body.Close()
				return resp.StatusCode
			}
			for i := range 5 {
				require.Equal(t, http.StatusOK, send(servers[i%2], "POST", "/login"), "login %d", i)
			}
			var wg sync.WaitGroup
			var passed, refused atomic.Int64
			for i := range 350 {
				wg.Go(func() {
					if i%7 == 0 {
						if send(servers[i%2], "GET", "/api") != http.StatusOK {
							refused.Add(1)
						}
						return
					}
					if send(servers[i%2], "POST", "/login") != http.StatusTooManyRequests {
						passed.Add(1)
					}
				})
			}
			wg.Wait()
			require.Zero(t, passed.Load(), "logins past the login layer")
			require.Zero(t, refused.Load(), "requests refused with the global layer's room")
			require.Equal(t, int64(55), handled.Load())
			for i := range 45 {
				require.Equal(t, http.StatusOK, send(servers[i%2], "GET", "/api"), "request %d of the 45 the global layer has left", i)
			}
			assert.Equal(t, http.StatusTooManyRequests, send(servers[0], "GET", "/api"), "the global layer is spent")
			assert.Equal(t, http.StatusTooManyRequests, send(servers[1], "GET", "/api"), "the global layer is spent")
		})
	}
}
