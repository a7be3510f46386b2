package ginlimit_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/adapters/gin"
	"github.com/apigate/ratelimit/adapters/internal/adapterstest"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

func TestNewPanicsOnNilFlow(t *testing.T) {
	adapterstest.CheckPanics(t, "New(nil)", func() { ginlimit.New(nil) })
}

func TestUser(t *testing.T) {
	adapterstest.CheckInvalidKeyFunc(t)(ginlimit.User(nil))
	adapterstest.CheckInvalidKeyFunc(t)(ginlimit.User([]string{"user"}))
	adapterstest.CheckUserKey(t, adapterstest.MustKeyFunc(t)(ginlimit.User("user")), nil, func(m adapterstest.Mount) adapterstest.App {
		e := gin.New()
		e.Use(func(c *gin.Context) {
			if id := c.GetHeader(adapterstest.UserHeader); id != "" {
				c.Set("user", id) // as an authentication middleware would
			}
		})
		e.Use(ginlimit.New(m.Flow))
		e.GET("/", func(c *gin.Context) { c.Status(http.StatusOK) })
		e.GET("/health", func(c *gin.Context) { c.Status(http.StatusOK) })
		return adapterstest.HTTPApp(e)
	})
}

func BenchmarkGin(b *testing.B) {
	adapterstest.BenchHTTP(b, func(f *httplimit.Flow) http.Handler {
		e := gin.New()
		if f != nil {
			e.Use(ginlimit.New(f))
		}
		e.GET("/users/:id", func(c *gin.Context) { c.Status(http.StatusOK) })
		return e
	})
}

func TestUnwrap(t *testing.T) {
	param := func(r keyfuncs.Request) (string, bool) {
		c, ok := ginlimit.Unwrap(r)
		if !ok {
			return "", false
		}
		return c.Param("id"), true
	}
	adapterstest.CheckUnwrap(t, param, func(m adapterstest.Mount) adapterstest.App {
		e := gin.New()
		e.GET("/users/:id", ginlimit.New(m.Flow), func(c *gin.Context) { c.Status(http.StatusOK) })
		return adapterstest.HTTPApp(e)
	})
}
