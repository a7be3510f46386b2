package fiberlimit

import (
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/utils"
)

// routeIndex is what Fiber's routing says of an app, for telling a 404
// for a path no route serves from a 404 on a route that exists: the
// routes (app.Get, app.All...: not app.Use's middleware), and the prefixes
// that app.Static serves.
type routeIndex struct {
	app      *fiber.App
	handlers uint32 // app.HandlersCount() when built: a route added since rebuilds it
	// routes holds each route's Handlers, by the address of their array,
	// which c.Route() shares: GetRoutes(true), Fiber's own filter, leaves
	// out the middleware.
	routes        map[*fiber.Handler]struct{}
	static        []string // the path prefixes of the app's static file servers
	caseSensitive bool
}

// staticHandler starts the name of the handler of every app.Static route,
// a closure of Fiber v2's registerStatic (RunNotFound's Static idioms fail
// should it move).
const staticHandler = "github.com/gofiber/fiber/v2.(*App).registerStatic."

// newRouteIndex reads app's routes.
func newRouteIndex(app *fiber.App) *routeIndex {
	x := &routeIndex{app: app, handlers: app.HandlersCount(), routes: map[*fiber.Handler]struct{}{},
		caseSensitive: app.Config().CaseSensitive}
	for _, r := range app.GetRoutes(true) {
		if len(r.Handlers) > 0 {
			x.routes[&r.Handlers[0]] = struct{}{}
		}
	}
	for _, r := range app.GetRoutes() {
		for _, h := range r.Handlers {
			fn := runtime.FuncForPC(reflect.ValueOf(h).Pointer())
			if fn != nil && strings.HasPrefix(fn.Name(), staticHandler) && !slices.Contains(x.static, r.Path) {
				x.static = append(x.static, r.Path)
			}
		}
	}
	return x
}

// unrouted reports whether no route served c, whose response is a 404:
// the route that ended the chain (c.Route()) is middleware (this
// limiter's own, when Fiber ran past the last route and answered "Cannot
// GET"; a not-found handler mounted with Use last), and no app.Static
// serves the path, whose missing files are 404s on a route that exists
// (the static handler passes them on down the chain, to that not-found
// handler or to Fiber's 404).
func (x *routeIndex) unrouted(c *fiber.Ctx) bool {
	if hs := c.Route().Handlers; len(hs) > 0 {
		if _, ok := x.routes[&hs[0]]; ok {
			return false
		}
	}
	if len(x.static) == 0 {
		return true
	}
	if m := c.Method(); m != fiber.MethodGet && m != fiber.MethodHead {
		return true // app.Static serves GET and HEAD
	}
	path := c.Path()
	if !x.caseSensitive {
		path = utils.ToLower(path)
	}
	for _, p := range x.static {
		if p == "/" || strings.HasPrefix(path, p) { // Fiber's prefix match of app.Use and app.Static
			return false
		}
	}
	return true
}

// routeCache holds the routeIndex of the app a middleware last served a
// 404 for. It is safe for concurrent use.
type routeCache struct{ p atomic.Pointer[routeIndex] }

// index returns app's routeIndex, read again when app has changed or has
// routes it had not.
func (rc *routeCache) index(app *fiber.App) *routeIndex {
	if x := rc.p.Load(); x != nil && x.app == app && x.handlers == app.HandlersCount() {
		return x
	}
	x := newRouteIndex(app)
	rc.p.Store(x)
	return x
}
