package adapterstest

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// Headers of the panic suite's requests: panicHeader names the function
// that must panic, clientHeader is the request's key.
const (
	panicHeader  = "X-Test-Panic"
	clientHeader = "X-Test-Client"
)

// RunPanics checks, over a real socket, that a panic in the user's skip,
// key or cost function or deny handler answers 500 with the default body,
// is reported as an *httplimit.PanicError naming where it happened, and leaves
// the server serving the next request. The harness adds no recovery
// middleware: for Fiber, an escaped panic ends the process.
func RunPanics(t *testing.T, h SocketHarness) {
	panicIn := func(r keyfuncs.Request, fn string) {
		if r.Header(panicHeader) == fn {
			panic("test panic in " + fn)
		}
	}
	p := core.Policy{Name: "panics", Algorithm: core.FixedWindow, Limit: 1, Window: time.Hour}
	ly := httplimit.Layer{
		Policy: p,
		Key: func(r keyfuncs.Request) (string, error) {
			panicIn(r, "key")
			key := r.Header(clientHeader)
			if key == "" {
				return "", keyfuncs.ErrNoKey
			}
			return key, nil
		},
		Cost: func(r keyfuncs.Request) int64 { panicIn(r, "cost"); return 1 },
	}
	var errs errorRecorder
	spec := &Spec{
		Global: []Mount{{Flow: NewFlow(t, NewStore(t), []httplimit.Layer{ly}, nil,
			errs.option(),
			httplimit.WithSkip(func(r keyfuncs.Request) bool { panicIn(r, "skip"); return false }),
			httplimit.WithResponder(func(r keyfuncs.Request, w httplimit.Response, d core.Decision, err error) {
				panicIn(r, "deny")
				httplimit.DefaultResponder(r, w, d, err)
			}),
		)}},
		Routes: []Route{{Method: "GET", Path: "/"}},
	}
	addr := h.Serve(t, spec)

	steps := []struct {
		client, panic string
		status        int
	}{
		{"a", "", 200},
		{"b", "key", 500},
		{"b", "", 200}, // the server still serves, and the panic spent no quota
		{"c", "cost", 500},
		{"d", "skip", 500},
		{"a", "deny", 500},
		{"a", "", 429},
		{"e", "", 200},
	}
	for i, s := range steps {
		req := RawRequest{Header: http.Header{clientHeader: {s.client}}}
		if s.panic != "" {
			req.Header.Set(panicHeader, s.panic)
		}
		res := Send(t, addr, req)
		assert.Equal(t, s.status, res.Status, "step %d (%s, panic in %q): body %q", i, s.client, s.panic, res.Body)
		if s.status == 500 {
			assert.Equal(t, internalBody, res.Body, "step %d", i)
			assert.NotContains(t, res.Body, "test panic", "step %d", i)
		}
	}
	assert.Equal(t, int64(3), spec.Hits(), "handler runs")

	var in []string
	for _, err := range errs.all() {
		var pe *httplimit.PanicError
		if assert.ErrorAs(t, err, &pe) {
			assert.Equal(t, "test panic in "+map[string]string{
				"key function": "key", "cost function": "cost", "skip function": "skip", "responder": "deny",
			}[panicWhere(pe)], pe.Value)
			in = append(in, panicWhere(pe))
		}
	}
	assert.Equal(t, []string{"key function", "cost function", "skip function", "responder"}, in)
}

// panicWhere returns where the panic of pe happened, as its message names it.
func panicWhere(pe *httplimit.PanicError) string {
	where, _, _ := strings.Cut(strings.TrimPrefix(pe.Error(), "httplimit: panic in "), ": ")
	return where
}
