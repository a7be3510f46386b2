package ginlimit_test

import (
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
)

// TestCanonicalHeaders reads every field the flow writes with Gin's
// c.Writer.Header().Get: in the handler, in a middleware around the
// limiter, and on the recorder of gin.CreateTestContext, as a Gin
// application and its tests do.
func TestCanonicalHeaders(t *testing.T) { adapterstest.RunCanonical(t, canonicalHarness{}) }

type canonicalHarness struct{}

func (canonicalHarness) ServeOne(_ testing.TB, f *httplimit.Flow, req adapterstest.Request, names []string) adapterstest.HeaderReads {
	var got adapterstest.HeaderReads
	rec := httptest.NewRecorder()
	c, e := gin.CreateTestContext(rec)
	e.Use(func(c *gin.Context) {
		c.Next()
		got.After = adapterstest.ReadFields(names, c.Writer.Header().Get)
	})
	e.Use(ginlimit.New(f))
	e.GET("/", func(c *gin.Context) {
		got.Handler = adapterstest.ReadFields(names, c.Writer.Header().Get)
		c.String(200, adapterstest.Body)
	})
	c.Request = httptest.NewRequest(req.Method, req.Path, nil)
	c.Request.RemoteAddr = req.RemoteAddr
	for k, vs := range req.Header {
		c.Request.Header[k] = vs
	}
	e.HandleContext(c)
	got.Status = rec.Code
	got.Recorder = adapterstest.ReadFields(names, rec.Header().Get)
	return got
}
