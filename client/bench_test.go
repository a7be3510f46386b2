package client_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/apigate/ratelimit/client"
)

// stub answers every request with the same 200 and its rate-limit fields,
// without a network, so that the benchmark measures the Transport alone.
type stub struct{ res http.Response }

func (s *stub) RoundTrip(*http.Request) (*http.Response, error) { return &s.res, nil }

// BenchmarkRoundTrip is the Transport's cost on a request that is not
// retried, against the bare transport it wraps.
func BenchmarkRoundTrip(b *testing.B) {
	base := &stub{res: http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{
		"Ratelimit-Limit": {"10"}, "Ratelimit-Remaining": {"9"}, "Ratelimit-Reset": {"1"},
	}}}
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	if err != nil {
		b.Fatal(err)
	}
	plain, err := client.New(base)
	if err != nil {
		b.Fatal(err)
	}
	paced, err := client.New(base, client.WithPacing(0))
	if err != nil {
		b.Fatal(err)
	}
	for _, bb := range []struct {
		name string
		rt   http.RoundTripper
	}{{"bare", base}, {"client", plain}, {"client-paced", paced}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bb.rt.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
