// Package ginlimit plugs an httplimit.Flow into Gin.
//
// New returns a gin.HandlerFunc running the Flow; build the Flow with
// httplimit.New. Mount it on the engine, a group or a route; put several
// limits on a request as layers of one Flow (all or nothing, one store
// call), not as two middlewares, which would spend the first's quota on
// requests the second denies:
//
//	flow, err := httplimit.New(store, []httplimit.Layer{
//		{Policy: perMinute}, // every request, by client address
//		{Policy: login, Methods: []string{"POST"}, Routes: []string{"/login"}}, // and a stricter limit here
//	})
//	r.Use(ginlimit.New(flow)) // every request, 404s included
//
// Key functions see the socket peer as RemoteAddr (not Gin's ClientIP,
// which trusts headers by default) and c.FullPath() as Route ("" when no
// route matched); Unwrap gives them the *gin.Context, User a user ID
// stored with c.Set. A request that does not proceed is answered and the
// chain aborted.
package ginlimit

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/internal/rules/userkey"
	"github.com/apigate/ratelimit/keyfuncs"
)

// New returns Gin middleware running f. A request that does not proceed
// has been answered, and the chain is aborted. New panics when f is nil:
// like http.Handle given a nil handler, it is a wiring mistake, reported
// when the routes are built (httplimit.New reports every other one).
func New(f *httplimit.Flow) gin.HandlerFunc {
	if f == nil {
		panic("ginlimit.New: nil *httplimit.Flow")
	}
	return func(c *gin.Context) {
		proceeded := f.Serve(request{c}, response{c}, func(ctx context.Context) int {
			if ctx != c.Request.Context() { // layers to settle: the handlers see ctx
				c.Request = c.Request.WithContext(ctx)
				c.Next()
				return c.Writer.Status()
			}
			c.Next()
			return 0
		})
		if !proceeded {
			c.Abort()
		}
	}
}

// Unwrap returns the *gin.Context behind r, for key, skip and cost
// functions that need Gin's own data. ok is false when r does not come from
// this package.
func Unwrap(r keyfuncs.Request) (c *gin.Context, ok bool) {
	q, ok := r.(request)
	return q.c, ok
}

// User returns a key function keying requests on the user ID
// that an earlier handler stored with c.Set(key, id): "user:" followed by
// the ID, as keyfuncs.User does. No value, or an empty one, gives an error
// wrapping keyfuncs.ErrNoKey (so that keyfuncs.FirstOf can fall back to
// another key). An ID may be a string, an integer or a fmt.Stringer (a
// UUID); a value of another type is reported as a misconfiguration. A nil
// or empty key, or one of a type that is not comparable, is an error
// wrapping core.ErrInvalidOption.
//
// Gin's c.Set values are not in c.Request.Context() (unless the engine
// sets ContextWithFallback, and even then the other way round), so
// keyfuncs.User cannot see them; this function reads them from the
// *gin.Context itself (see Unwrap).
func User(key any) (keyfuncs.Func, error) {
	if err := userkey.CheckKey("ginlimit.User", key); err != nil {
		return nil, err
	}
	users := userkey.New(fmt.Sprintf("gin context key %q", fmt.Sprint(key)))
	return func(r keyfuncs.Request) (string, error) {
		c, ok := Unwrap(r)
		if !ok {
			return "", fmt.Errorf("ginlimit.User: request not from ginlimit")
		}
		return users.Value(c.Get(key))
	}, nil
}

// request is Gin's request as a keyfuncs.Request. Holding one pointer, it
// converts to an interface without allocating.
type request struct{ c *gin.Context }

func (q request) RemoteAddr() string                { return q.c.Request.RemoteAddr }
func (q request) Header(name string) string         { return q.c.Request.Header.Get(name) }
func (q request) HeaderValues(name string) []string { return q.c.Request.Header.Values(name) }
func (q request) Method() string                    { return q.c.Request.Method }
func (q request) Route() string                     { return q.c.FullPath() }
func (q request) Context() context.Context          { return q.c.Request.Context() }

// Path is the request's path, for the routes of httplimit layers.
func (q request) Path() string { return q.c.Request.URL.Path }

// Unrouted reports whether no route serves the request: c.FullPath() is
// "".
func (q request) Unrouted() bool { return q.c.FullPath() == "" }

// response is Gin's response as a httplimit.Response.
type response struct{ c *gin.Context }

func (w response) Set(key, value string) { w.c.Writer.Header().Set(key, value) }

// HeaderMap is the response's header map, in which the flow sets the
// rate-limit fields under their canonical names.
func (w response) HeaderMap() http.Header { return w.c.Writer.Header() }

func (w response) Write(status int, contentType string, body []byte) error {
	w.c.Writer.Header().Set("Content-Type", contentType)
	w.c.Writer.WriteHeader(status)
	_, err := w.c.Writer.Write(body)
	return err
}
