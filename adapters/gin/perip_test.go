package ginlimit_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
)

// TestPerIPOverSockets: the one-line form, httplimit.PerIP mounted with
// ginlimit.New, served on a real listener on 127.0.0.1: a client's first three
// requests pass, its fourth gets 429 and a Retry-After.
func TestPerIPOverSockets(t *testing.T) {
	r := gin.New()
	r.Use(ginlimit.New(httplimit.PerIP(adapterstest.NewStore(t), 3, time.Minute)))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, adapterstest.Body) })
	addr := adapterstest.ListenHTTP(t, r)
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		res := adapterstest.Send(t, addr, adapterstest.RawRequest{})
		require.Equal(t, want, res.Status, "request %d: %s", i+1, res.Body)
		if want == http.StatusTooManyRequests {
			retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
			require.NoError(t, err, "Retry-After %q", res.Header.Get("Retry-After"))
			assert.Positive(t, retry, "Retry-After")
		}
	}
}
