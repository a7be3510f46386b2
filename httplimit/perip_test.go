package httplimit_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
)

// TestPerIPPanicsOnInvalidArguments: PerIP panics with New's error,
// prefixed by the call.
func TestPerIPPanicsOnInvalidArguments(t *testing.T) {
	store := memStore(t)
	tests := []struct {
		name   string
		store  core.Store
		limit  int64
		window time.Duration
		want   string
	}{
		{"limit 0", store, 0, time.Minute,
			"httplimit.PerIP(0, 1m0s): ratelimit: invalid argument: policy: limit 0 is out of range [1, 1000000000000]"},
		{"nil store", nil, 100, time.Minute,
			"httplimit.PerIP(100, 1m0s): ratelimit: invalid argument: httplimit.New: nil store"},
		{"window under 1ms", store, 100, time.Microsecond,
			"httplimit.PerIP(100, 1µs): ratelimit: invalid argument: policy: window 1µs is out of range [1ms, 8784h0m0s]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				err, ok := recover().(error)
				require.True(t, ok, "PerIP panics with an error")
				assert.EqualError(t, err, tc.want)
				assert.True(t, errors.Is(err, core.ErrInvalidOption), "the error wraps core.ErrInvalidOption")
			}()
			httplimit.PerIP(tc.store, tc.limit, tc.window)
		})
	}
}

// TestPerIP: 100 a minute for each client address, by the sliding window
// counter; the 101st request of an address is refused, another address's
// passes.
func TestPerIP(t *testing.T) {
	f := httplimit.PerIP(memStore(t), 100, time.Minute)
	layers := f.Layers()
	require.Len(t, layers, 1)
	assert.Equal(t, core.Policy{Name: "sliding_window_counter-100-per-1m0s", Algorithm: core.SlidingWindowCounter,
		Limit: 100, Window: time.Minute}, layers[0].Policy)

	for i := range 100 {
		w := newResponse()
		require.True(t, handle(f, newRequest(), w), "request %d", i+1)
	}
	w := newResponse()
	assert.False(t, handle(f, newRequest(), w), "the 101st request")
	assert.Equal(t, http.StatusTooManyRequests, w.status)
	assert.NotEmpty(t, w.header.Get("Retry-After"))

	other := newRequest()
	other.remote = "198.51.100.7:4321"
	assert.True(t, handle(f, other, newResponse()), "another address has its own quota")
}
