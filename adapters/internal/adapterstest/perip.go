package adapterstest

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/httplimit"
)

// CheckPerIP checks the one-line form, httplimit.PerIP(store, 3,
// time.Minute), mounted by the adapter on a real listener on 127.0.0.1
// (serve mounts f on a route "/" that answers 200 Body, and returns the
// address): a client's first three requests pass, its fourth gets 429 and
// a Retry-After, each request forging another X-Forwarded-For, which the
// default key, trusting no proxy, does not read.
func CheckPerIP(t *testing.T, serve func(t testing.TB, f *httplimit.Flow) (addr string)) {
	addr := serve(t, httplimit.PerIP(NewStore(t), 3, time.Minute))
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		forged := http.Header{"X-Forwarded-For": {"198.51.100." + strconv.Itoa(i+1)}}
		res := Send(t, addr, RawRequest{Header: forged})
		require.Equal(t, want, res.Status, "request %d: %s", i+1, res.Body)
		if want == http.StatusTooManyRequests {
			retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
			require.NoError(t, err, "Retry-After %q", res.Header.Get("Retry-After"))
			assert.Positive(t, retry, "Retry-After")
		}
	}
}
