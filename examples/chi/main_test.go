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
