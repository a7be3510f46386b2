package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"

	ginlimit "github.com/apigate/ratelimit/adapters/gin"
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
	// A user stored as a struct is a misconfiguration: 500.
	adapterstest.CheckUserKey(t, adapterstest.MustKeyFunc(t)(ginlimit.User("user")), nil, http.StatusInternalServerError, func(m adapterstest.Mount) adapterstest.App {
		e := gin.New()
		e.Use(func(c *gin.Context) {
			if id := c.GetHeader(adapterstest.UserHeader); id != "" {
				c.Set("user", adapterstest.UserValue(id)) // as an authentication middleware would
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

// TestUserIntegerID: an auth middleware that stores a numeric user ID
// (c.Set("user", 42)) keys by it, "user:42", instead of failing every
// request with 500.
func TestUserIntegerID(t *testing.T) {
	var log adapterstest.KeyLog
	m := adapterstest.FixedMount(t, 1, log.Wrap(adapterstest.MustKeyFunc(t)(ginlimit.User("user"))))
	e := gin.New()
	e.Use(func(c *gin.Context) {
		if id, err := strconv.Atoi(c.GetHeader(adapterstest.UserHeader)); err == nil {
			c.Set("user", id) // an int, as many auth middlewares store it
		}
	})
	e.Use(ginlimit.New(m.Flow))
	e.GET("/", func(c *gin.Context) { c.Status(http.StatusOK) })
	var got []int
	for _, id := range []string{"42", "42", "7"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set(adapterstest.UserHeader, id)
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		got = append(got, w.Code)
	}
	assert.Equal(t, []int{http.StatusOK, http.StatusTooManyRequests, http.StatusOK}, got)
	assert.Equal(t, []string{"user:42", "user:42", "user:7"}, log.Keys())
}
