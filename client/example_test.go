package client_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/apigate/ratelimit/client"
)

// A server refuses the first request with 429 and Retry-After; the
// Transport waits as told and the caller sees only the 200.
func ExampleNew() {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	tr, err := client.New(nil, client.WithMaxRetries(3), client.WithMaxWait(5*time.Second))
	if err != nil {
		panic(err)
	}
	hc := &http.Client{Transport: tr}
	res, err := hc.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	fmt.Println(res.StatusCode, "after", calls.Load(), "requests")
	// Output: 200 after 2 requests
}
