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
func TestCanonicalHeaders(t *testing.T) {
	adapterstest.RunCanonical(t, func(_ testing.TB, f *httplimit.Flow, req adapterstest.Request, read *adapterstest.FieldReads) (int, func(string) string) {
		rec := httptest.NewRecorder()
		c, e := gin.CreateTestContext(rec)
		e.Use(func(c *gin.Context) {
			c.Next()
			read.After(c.Writer.Header().Get)
		})
		e.Use(ginlimit.New(f))
		e.GET("/", func(c *gin.Context) {
			read.Handler(c.Writer.Header().Get)
			c.String(200, adapterstest.Body)
		})
		c.Request = adapterstest.NewRequest(req)
		e.HandleContext(c)
		return rec.Code, rec.Header().Get
	})
}
