package adapterstest

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/testkit/clockstore"
	"github.com/apigate/ratelimit/keyfuncs"
	"github.com/apigate/ratelimit/reputation"
)

// RunDoors checks, over real sockets on memory, the doors a reputation
// and the quota endpoint must keep shut:
//   - a client the reputation banned gets 403 from the quota endpoint,
//     as a deny-listed one does, and shows no quota;
//   - the quota endpoint shows only the layers keyed by the caller
//     (an address, an API key, a user), never a layer shared by every
//     client (keyfuncs.Static, keyfuncs.Route alone) unless WithQuota
//     names it;
//   - a success-only layer (httplimit.CountSuccesses) admits at most
//     Limit successes and Limit failures a window: after Limit failures
//     a good request is refused too, its handler not run, until the
//     window frees room;
//   - with the reputation keyed by an identity the client claims
//     (Config.Key reading a key id), an attacker sending the victim's
//     key id with wrong secrets from one address is banned, by its
//     address; the victim, from another address with the right secret,
//     is never refused nor scaled.
func RunDoors(t *testing.T, h SocketHarness) {
	client, err := keyfuncs.NewClientIP(keyfuncs.TrustedProxies("127.0.0.0/8"))
	require.NoError(t, err)
	run := rand.IntN(1 << 20)
	routes := []Route{{Method: "GET", Path: "/"}, {Method: "POST", Path: "/login"}}
	quota := func(t *testing.T, addr string, hd http.Header) (map[string]quotaLayer, Response) {
		t.Helper()
		res := Send(t, addr, RawRequest{Path: "/rate_limit", Header: hd})
		if res.Status != http.StatusOK {
			return nil, res
		}
		var body struct {
			Layers []quotaLayer `json:"layers"`
		}
		require.NoError(t, json.Unmarshal([]byte(res.Body), &body), res.Body)
		out := map[string]quotaLayer{}
		for _, l := range body.Layers {
			out[l.Name] = l
		}
		return out, res
	}

	t.Run("quota-of-a-banned-client", func(t *testing.T) {
		rep, err := reputation.New(reputation.Config{Bands: repBands})
		require.NoError(t, err)
		f := NewFlow(t, clockstore.At(NewStore(t), T0), []httplimit.Layer{{Policy: fixed("all", 1000)}}, nil,
			httplimit.WithClientIP(client), httplimit.WithReputation(rep), httplimit.WithQuota("/rate_limit"))
		addr := h.Serve(t, &Spec{Global: []Mount{{Flow: f}}, Routes: routes})
		ip := repIP(run, 21)
		q, res := quota(t, addr, fromIP(ip))
		require.NotNil(t, q, "before the ban: %d %s", res.Status, res.Body)
		c := Dial(t, addr)
		for i := range 41 { // the 41st missing path takes it past 40: banned
			require.Equal(t, http.StatusNotFound, c.Do(t, RawRequest{Path: "/wp-admin/" + strconv.Itoa(i), Header: fromIP(ip)}).Status)
		}
		require.Equal(t, http.StatusForbidden, c.Do(t, RawRequest{Path: "/", Header: fromIP(ip)}).Status, "banned")
		q, res = quota(t, addr, fromIP(ip))
		assert.Nil(t, q, "a banned client is shown no quota")
		assert.Equal(t, http.StatusForbidden, res.Status, "a banned client's quota request: %s", res.Body)
		assert.NotEmpty(t, res.Header.Get("Retry-After"), "the ban's end")
		q, res = quota(t, addr, fromIP(repIP(run, 22)))
		assert.NotNil(t, q, "another client: %d %s", res.Status, res.Body)
	})

	t.Run("quota-hides-shared-layers", func(t *testing.T) {
		global, err := keyfuncs.Static("api")
		require.NoError(t, err)
		apiKey, err := keyfuncs.APIKeyHeader("X-API-Key", nil)
		require.NoError(t, err)
		perKey, err := keyfuncs.Compose(apiKey, client.Key)
		require.NoError(t, err)
		layers := []httplimit.Layer{
			{Policy: fixed("global", 1_000_000), Key: global},
			{Policy: fixed("endpoint", 10_000), Key: keyfuncs.Route()},
			{Policy: fixed("ip", 100), Key: client.Key},
			{Policy: fixed("key", 50), Key: perKey},
		}
		for _, c := range []struct {
			name string
			show []string
			want []string
		}{
			{"by default", nil, []string{"ip", "key"}},
			{"global named", []string{"global"}, []string{"global", "ip", "key"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				f := NewFlow(t, clockstore.At(NewStore(t), T0), layers, nil,
					httplimit.WithClientIP(client), httplimit.WithQuota("/rate_limit", c.show...))
				addr := h.Serve(t, &Spec{Global: []Mount{{Flow: f}}, Routes: routes})
				other := fromIP(repIP(run, 24), "X-API-Key", "k2")
				for range 3 { // another client's traffic: what a shared layer would disclose
					require.Equal(t, http.StatusOK, Send(t, addr, RawRequest{Header: other}).Status)
				}
				q, res := quota(t, addr, fromIP(repIP(run, 23), "X-API-Key", "k1"))
				require.NotNil(t, q, "%d %s", res.Status, res.Body)
				var names []string
				for _, ly := range layers {
					if _, ok := q[ly.Policy.Name]; ok {
						names = append(names, ly.Policy.Name)
					}
				}
				assert.Equal(t, c.want, names, "the layers shown")
				assert.Equal(t, int64(100), q["ip"].Remaining, "the caller's own")
			})
		}
	})

	t.Run("success-only-layer", func(t *testing.T) {
		api := httplimit.Layer{Policy: core.Policy{Name: "api", Algorithm: core.FixedWindow, Limit: 5, Window: time.Minute},
			Key: client.Key, Counts: httplimit.CountSuccesses}
		f := NewFlow(t, clockstore.At(NewStore(t), T0), []httplimit.Layer{api}, nil,
			httplimit.WithClientIP(client), httplimit.WithQuota("/rate_limit"))
		spec := &Spec{Global: []Mount{{Flow: f}}, Routes: routes}
		addr := h.Serve(t, spec)
		failing, good := repIP(run, 25), repIP(run, 26)
		for range 5 {
			require.Equal(t, http.StatusUnauthorized, Send(t, addr, RawRequest{Path: "/", Header: fromIP(failing, StatusHeader, "401")}).Status)
		}
		q, _ := quota(t, addr, fromIP(failing))
		require.NotNil(t, q)
		assert.Equal(t, int64(5), q["api"].Remaining, "failures never count as successes")
		assert.Equal(t, int64(0), q["api.failures"].Remaining, "its failures used up")
		hits := spec.Hits()
		for i := range 8 {
			res := Send(t, addr, RawRequest{Path: "/", Header: fromIP(failing)})
			require.Equal(t, http.StatusTooManyRequests, res.Status, "good request %d after Limit failures: refused until the window frees room", i)
			assert.Equal(t, "55", res.Header.Get("Retry-After"), "the window's end")
		}
		assert.Equal(t, hits, spec.Hits(), "no refused request reached its handler")

		for range 5 {
			require.Equal(t, http.StatusOK, Send(t, addr, RawRequest{Path: "/", Header: fromIP(good)}).Status)
		}
		for _, hd := range []http.Header{fromIP(good), fromIP(good, StatusHeader, "401")} {
			res := Send(t, addr, RawRequest{Path: "/", Header: hd})
			assert.Equal(t, http.StatusTooManyRequests, res.Status, "after Limit successes, any request is refused")
		}
	})

	t.Run("reputation-of-a-claimed-identity", func(t *testing.T) {
		keyID := keyfuncs.Func(func(r keyfuncs.Request) (string, error) { // claimed: no secret checked
			if v := r.Header("X-Key-Id"); v != "" {
				return "keyid:" + v, nil
			}
			return "", keyfuncs.ErrNoKey
		})
		rep, err := reputation.New(reputation.Config{Bands: repBands, Key: keyID})
		require.NoError(t, err)
		layers := []httplimit.Layer{
			{Policy: fixed("login", 10), Methods: []string{"POST"}, Routes: []string{"/login"}},
			{Policy: fixed("key", 1000), Key: keyID},
		}
		f := NewFlow(t, clockstore.At(NewStore(t), T0), layers, nil, httplimit.WithClientIP(client), httplimit.WithReputation(rep),
			httplimit.WithHeaders(headers.Config{XRateLimit: true, Structured: true, RetryAfter: true}))
		addr := h.Serve(t, &Spec{Global: []Mount{{Flow: f}}, Routes: routes})
		attacker, victim := repIP(run, 27), repIP(run, 28)
		wrong := func(i int) RawRequest {
			return RawRequest{Method: "POST", Path: "/login", Header: fromIP(attacker, "X-Key-Id", "victim", StatusHeader, "401")}
		}
		right := func(t *testing.T, when string) {
			t.Helper()
			res := Send(t, addr, RawRequest{Method: "POST", Path: "/login", Header: fromIP(victim, "X-Key-Id", "victim")})
			require.Equal(t, http.StatusOK, res.Status, "%s: the victim, with the right secret: %s", when, res.Body)
			assert.Contains(t, res.Header.Get("Ratelimit-Policy"), `"key";q=1000;`, "%s: the victim's key limit not scaled", when)
		}
		c := Dial(t, addr)
		seen := map[int]int{}
		for i := range 25 { // 10 refused (401), 15 over the login limit (429): in the band that halves limits
			seen[c.Do(t, wrong(i)).Status]++
		}
		assert.Equal(t, map[int]int{http.StatusUnauthorized: 10, http.StatusTooManyRequests: 15}, seen)
		right(t, "after 25 failures")
		for i := 25; i < 100; i++ {
			res := c.Do(t, wrong(i))
			seen[res.Status]++
			if res.Status == http.StatusForbidden {
				break
			}
		}
		assert.Equal(t, 1, seen[http.StatusForbidden], "the attacker is banned: %v", seen)
		assert.Equal(t, 41, seen[http.StatusUnauthorized]+seen[http.StatusTooManyRequests], "at its 41st failure")
		right(t, "after the attacker's ban")
		res := Send(t, addr, RawRequest{Path: "/", Header: fromIP(attacker, "X-Key-Id", "another")})
		assert.Equal(t, http.StatusForbidden, res.Status, "the ban is the attacker's address's, whatever identity it claims")
		right(t, "at the end")
		t.Logf("the attacker's answers: %v", seen)
	})
}
