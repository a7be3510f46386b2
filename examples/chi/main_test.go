package main

import (
	"testing"

	"github.com/apigate/ratelimit/examples/internal/demo"
	"github.com/apigate/ratelimit/examples/internal/demotest"
)

// TestApp sends requests through the chi app built by newApp, the one main
// serves, over small limits.
func TestApp(t *testing.T) {
	demotest.Run(t, func(l demo.Limiters) demotest.Client {
		return demotest.Handler(newApp(l))
	})
}

// TestMetrics serves the app as main does, on a loopback port, and finds
// its decisions counted at GET /metrics, which is never limited.
func TestMetrics(t *testing.T) {
	demotest.Metrics(t, newServer)
}

// TestDenyList serves the app as main does with DENY_FILE's deny list, on
// a loopback port: a client the file lists gets 403 on every route but
// GET /metrics, from the moment the file lists it to the moment it no
// longer does.
func TestDenyList(t *testing.T) {
	demotest.DenyList(t, newServer)
}
