package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	chilimit "github.com/apigate/ratelimit/adapters/chi"
	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// TestErrStoreReachesErrorHandler: an ErrorHandler tells a store outage
// from a client's mistake with errors.Is(err, core.ErrStore), as the
// README shows, through a real net/http handler: the outage's error is
// ErrStore and still the store's own, and a missing key is neither.
func TestErrStoreReachesErrorHandler(t *testing.T) {
	var mu sync.Mutex
	var heard []error
	onError := func(_ keyfuncs.Request, err error) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, err)
	}
	p := core.Policy{Algorithm: core.FixedWindow, Limit: 10, Window: time.Minute}
	noKey := func(keyfuncs.Request) (string, error) { return "", keyfuncs.ErrNoKey }
	for _, tc := range []struct {
		name      string
		layer     httplimit.Layer
		wantStore bool
	}{
		{"store down", httplimit.Layer{Policy: p}, true},
		{"no key", httplimit.Layer{Policy: p, Key: noKey}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			heard = nil
			f, err := httplimit.New(downStore{}, []httplimit.Layer{tc.layer}, httplimit.WithErrorHandler(onError))
			require.NoError(t, err)
			h := chilimit.New(f)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
			srv := httptest.NewServer(h)
			defer srv.Close()
			resp, err := srv.Client().Get(srv.URL)
			require.NoError(t, err)
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, heard, 1)
			assert.Equal(t, tc.wantStore, errors.Is(heard[0], core.ErrStore), "errors.Is(%v, core.ErrStore)", heard[0])
			assert.Equal(t, tc.wantStore, errors.Is(heard[0], errDown), "the store's own error is wrapped")
			if tc.wantStore {
				assert.Equal(t, http.StatusOK, resp.StatusCode, "the outage fails open by default")
			}
		})
	}
}
