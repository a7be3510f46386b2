package httplimit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/apigate/ratelimit/httplimit"
)

// BenchmarkHandleQuota is a layered GET that is not the quota endpoint,
// with WithQuota and without: the endpoint's check must cost the other
// requests nothing (it cost 1.3 µs and a 1.8 kB allocation when it
// normalized every GET's path).
func BenchmarkHandleQuota(b *testing.B) {
	for _, with := range []bool{false, true} {
		name := map[bool]string{false: "without", true: "with"}[with]
		b.Run(name, func(b *testing.B) {
			var opts []httplimit.Option
			if with {
				opts = append(opts, httplimit.WithQuota("/rate_limit"))
			}
			ls := testLayers(b)
			ls[0].Policy.Limit = 1_000_000_000_000
			f, err := httplimit.New(memStore(b), ls, opts...)
			require.NoError(b, err)
			r, w := newPathRequest("GET", "/api/v1/users/12345/orders"), newResponse()
			b.ReportAllocs()
			for b.Loop() {
				handle(f, r, w)
			}
		})
	}
}
