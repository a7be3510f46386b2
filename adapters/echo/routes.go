package echolimit

import (
	"sync/atomic"

	"github.com/labstack/echo/v4"
)

// routeIndex is what an Echo router's routes say of the path it matched,
// for Unrouted: the routes, by method and path, and the paths of those
// registered with e.RouteNotFound.
type routeIndex struct {
	router   *echo.Router
	routes   map[methodPath]struct{}
	notFound map[string]struct{}
}

type methodPath struct{ method, path string }

// newRouteIndex reads router's routes: a walk of them all, which Unrouted
// makes once, and not on every 404.
func newRouteIndex(router *echo.Router) *routeIndex {
	x := &routeIndex{router: router, routes: map[methodPath]struct{}{}, notFound: map[string]struct{}{}}
	for _, rt := range router.Routes() {
		if rt.Method == echo.RouteNotFound {
			x.notFound[rt.Path] = struct{}{}
		} else {
			x.routes[methodPath{rt.Method, rt.Path}] = struct{}{}
		}
	}
	return x
}

// routeCache holds the routeIndex of the router a middleware last served
// a 404 from. It is safe for concurrent use.
type routeCache struct{ p atomic.Pointer[routeIndex] }

// unrouted reports whether path, which router matched for a request of
// method, is no route of method. A path the index holds neither as a
// route nor as e.RouteNotFound's makes it read the router again: a route
// registered since the index was read. (A route of some method
// registered since on a path that e.RouteNotFound held is not seen; but
// Echo wants its routes registered before it serves: its router takes no
// lock, and its contexts are sized for the routes' parameters then.)
func (rc *routeCache) unrouted(router *echo.Router, method, path string) bool {
	x := rc.p.Load()
	fresh := x == nil || x.router != router
	if fresh {
		x = newRouteIndex(router)
		rc.p.Store(x)
	}
	if _, ok := x.routes[methodPath{method, path}]; ok {
		return false
	}
	if _, ok := x.notFound[path]; ok || fresh {
		return true
	}
	x = newRouteIndex(router)
	rc.p.Store(x)
	_, ok := x.routes[methodPath{method, path}]
	return !ok
}
