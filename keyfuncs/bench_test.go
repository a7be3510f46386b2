package keyfuncs

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
)

func benchKey(b *testing.B, fn Func, r Request) {
	b.Helper()
	if k, err := fn(r); err != nil || k == "" {
		b.Fatalf("key %q, %v", k, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		fn(r)
	}
}

func BenchmarkIPKey(b *testing.B) {
	peer := mustResolver(b).key
	proxied := mustResolver(b, TrustedProxies("10.0.0.0/8", "172.16.0.0/12")).key
	forwarded := mustResolver(b, TrustedProxies("10.0.0.0/8", "172.16.0.0/12"), UseForwarded()).key
	header := mustResolver(b, TrustedProxies("10.0.0.0/8"), TrustedHeader("CF-Connecting-IP")).key
	b.Run("peer/ipv4", func(b *testing.B) { benchKey(b, peer, req("203.0.113.7:54321")) })
	b.Run("peer/ipv6", func(b *testing.B) { benchKey(b, peer, req("[2001:db8:1:1a0::7]:54321")) })
	b.Run("peer/ipv4-1000-clients", func(b *testing.B) {
		// Clients taking turns: the key cache misses, as formatting costs.
		reqs := make([]Request, 1000)
		for i := range reqs {
			reqs[i] = req(fmt.Sprintf("198.51.%d.%d:54321", i/250, i%250))
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			peer(reqs[i%len(reqs)])
			i++
		}
	})
	b.Run("peer/forged-xff", func(b *testing.B) {
		benchKey(b, peer, req("203.0.113.7:54321", "X-Forwarded-For", "6.6.6.6, 7.7.7.7"))
	})
	b.Run("xff/3-entries", func(b *testing.B) {
		benchKey(b, proxied, req("10.0.0.1:54321", "X-Forwarded-For", "6.6.6.6, 198.51.100.1, 172.16.0.9"))
	})
	b.Run("xff/3-entries-ipv6", func(b *testing.B) {
		benchKey(b, proxied, req("10.0.0.1:54321", "X-Forwarded-For", "6.6.6.6, [2001:db8:1:1a0::7]:443, 172.16.0.9"))
	})
	b.Run("forwarded/3-elements", func(b *testing.B) {
		benchKey(b, forwarded, req("10.0.0.1:54321", "Forwarded",
			`for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https, for=172.16.0.9;by=10.0.0.1`))
	})
	b.Run("trusted-header", func(b *testing.B) {
		benchKey(b, header, req("10.0.0.1:54321", "CF-Connecting-IP", "198.51.100.1"))
	})
}

func BenchmarkAPIKey(b *testing.B) {
	r := req("", "Authorization", "Bearer sk_live_0123456789abcdef0123456789abcdef")
	must := mustFunc(b)
	b.Run("sha256", func(b *testing.B) { benchKey(b, must(APIKeyHeader("Authorization", nil)), r) })
	b.Run("hmac", func(b *testing.B) {
		benchKey(b, must(APIKeyHeader("Authorization", []byte("pepper"))), r)
	})
}

func BenchmarkCompose(b *testing.B) {
	prev := slog.Default() // FirstOf's one report of a fallback, out of the results
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	b.Cleanup(func() { slog.SetDefault(prev) })
	must := mustFunc(b)
	ip := must(clientIPKey())
	r := &fakeRequest{remote: "203.0.113.7:1", route: "/users/{id}"}
	b.Run("route+ip", func(b *testing.B) { benchKey(b, must(Compose(Route(), ip)), r) })
	b.Run("firstof-user-ip", func(b *testing.B) { benchKey(b, must(FirstOf(must(User(anonymous)), ip)), r) })
}
