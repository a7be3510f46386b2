package demo

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
)

// ListeningPrefix starts the banner line giving the server's URL, which
// tools (and the examples' tests) may look for: "listening on
// http://127.0.0.1:8080".
const ListeningPrefix = "listening on "

// WriteBanner writes to w what the demo serves and how to try it: the
// framework, the URL of the listener at addr, the store, the deny list
// (deny, nil when DENY_FILE is not set), the limits p and curl command
// lines to run against them.
func WriteBanner(w io.Writer, framework string, addr net.Addr, storeName string, deny *DenyList, p Policies) error {
	u := BaseURL(addr)
	var b strings.Builder
	fmt.Fprintf(&b, "ratelimit demo (%s) %s%s\n", framework, ListeningPrefix, u)
	if storeName == "memory" {
		fmt.Fprintf(&b, "store: memory (this process only; set REDIS_URL=redis://127.0.0.1:6379/0 to share limits through Redis)\n")
	} else {
		fmt.Fprintf(&b, "store: %s (limits shared by every instance using it)\n", storeName)
	}
	if deny == nil {
		fmt.Fprintf(&b, "deny list: none (set %s=./deny.txt to answer 403 to the addresses and CIDR ranges it lists, one a line; reloaded when it changes)\n", DenyFileEnv)
	} else {
		entries := fmt.Sprintf("%d entries", len(deny.Entries()))
		if len(deny.Entries()) == 1 {
			entries = "1 entry"
		}
		fmt.Fprintf(&b, "deny list: %s (%s; reloaded when it changes): a listed address or range gets 403 on every request but GET %s\n",
			deny.Path, entries, MetricsPath)
	}
	fmt.Fprintf(&b, "limits:\n")
	fmt.Fprintf(&b, "  %-16s %s, per client IP (but GET %s)\n", "every request", Describe(p.Global), MetricsPath)
	fmt.Fprintf(&b, "  %-16s %s, per client IP (%s=%s logs in and clears the strikes)\n", "POST /login", Describe(p.Login), PasswordField, DemoPassword)
	fmt.Fprintf(&b, "  %-16s %s, per %s header\n", "GET /api/data", Describe(p.API), APIKeyHeader)
	fmt.Fprintf(&b, "  %-16s %s, per route and client IP:\n", "GET /users/{id}", Describe(p.Users))
	fmt.Fprintf(&b, "  %-16s a quota of its own (layer \"posts\")\n", "  and /posts")
	fmt.Fprintf(&b, "metrics: GET %s%s, never limited, for Prometheus (limit=%q, %q, %q, %q, %q)\n",
		u, MetricsPath, p.Global.Name, p.Login.Name, p.API.Name, p.Users.Name, PostsLayer)
	fmt.Fprintf(&b, "quota: GET %s%s shows this client's quota in every layer, spending none\n", u, QuotaPath)
	fmt.Fprintf(&b, "try it:\n")
	fmt.Fprintf(&b, "  # the global limit: the burst passes, then 429 with Retry-After\n")
	fmt.Fprintf(&b, "  for i in $(seq 1 %d); do curl -s -o /dev/null -w '%%{http_code}\\n' %s/; done\n", limits.Capacity(p.Global.Algorithm, p.Global.Limit, p.Global.Burst)+5, u)
	fmt.Fprintf(&b, "  curl -i %s/\n", u)
	fmt.Fprintf(&b, "  # the login guard (every request counts against the global limit too: after the loop above, wait %s)\n", shortDuration(refillTime(p.Global)))
	fmt.Fprintf(&b, "  # the right password logs in (200) and clears this client's strikes\n")
	fmt.Fprintf(&b, "  curl -i -d %s=%s %s/login\n", PasswordField, DemoPassword, u)
	if lo := p.Login.Lockout; lo > 0 {
		fmt.Fprintf(&b, "  # wrong ones: %d pass (401), the %s locks this client out for %s (429, Retry-After: %d), even with the right password\n",
			limits.Capacity(p.Login.Algorithm, p.Login.Limit, p.Login.Burst), ordinal(limits.Capacity(p.Login.Algorithm, p.Login.Limit, p.Login.Burst)+1), shortDuration(lo), int64(lo/time.Second))
		fmt.Fprintf(&b, "  for i in $(seq 1 %d); do curl -s -o /dev/null -w '%%{http_code}\\n' -d %s=wrong %s/login; done\n", limits.Capacity(p.Login.Algorithm, p.Login.Limit, p.Login.Burst)+1, PasswordField, u)
		fmt.Fprintf(&b, "  curl -i -d %s=%s %s/login\n", PasswordField, DemoPassword, u)
	} else {
		fmt.Fprintf(&b, "  # wrong ones: %d pass (401), then 429 with Retry-After\n", limits.Capacity(p.Login.Algorithm, p.Login.Limit, p.Login.Burst))
		fmt.Fprintf(&b, "  for i in $(seq 1 %d); do curl -s -o /dev/null -w '%%{http_code}\\n' -d %s=wrong %s/login; done\n", limits.Capacity(p.Login.Algorithm, p.Login.Limit, p.Login.Burst)+2, PasswordField, u)
	}
	fmt.Fprintf(&b, "  # the API limit, keyed by API key; without one: 400\n")
	fmt.Fprintf(&b, "  curl -i -H '%s: demo' %s/api/data\n", APIKeyHeader, u)
	fmt.Fprintf(&b, "  curl -i %s/api/data\n", u)
	fmt.Fprintf(&b, "  # one quota per route: /users/1 and /users/2 share one, /users/1/posts has another\n")
	fmt.Fprintf(&b, "  curl -i %s/users/42\n", u)
	fmt.Fprintf(&b, "  curl -i %s/users/42/posts\n", u)
	if deny != nil {
		fmt.Fprintf(&b, "  # deny this very client: within a moment every request gets 403 (but GET %s); delete the line to lift it\n", MetricsPath)
		fmt.Fprintf(&b, "  echo %s >> %s\n", clientAddr(addr), shellQuote(deny.Path))
		fmt.Fprintf(&b, "  curl -i %s/\n", u)
	}
	fmt.Fprintf(&b, "  # what the limiter decided, as Prometheus scrapes it\n")
	fmt.Fprintf(&b, "  curl -s %s%s | grep '^ratelimit_decisions_total'\n", u, MetricsPath)
	fmt.Fprintf(&b, "Ctrl-C (SIGINT) or SIGTERM stops the server gracefully.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// BaseURL returns the URL a client on this host reaches the listener at
// addr by: "http://127.0.0.1:8080". An unspecified address (a listener on
// ":8080", "0.0.0.0:8080" or "[::]:8080") is reached through 127.0.0.1.
func BaseURL(addr net.Addr) string {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	ip := ap.Addr().Unmap()
	if ip.IsUnspecified() {
		// Go's "tcp" listeners on 0.0.0.0 and on [::] both accept IPv4.
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	return "http://" + netip.AddrPortFrom(ip, ap.Port()).String()
}

// clientAddr returns the address a curl on this host to BaseURL(addr)
// comes from: the host in that URL.
func clientAddr(addr net.Addr) string {
	u := strings.TrimPrefix(BaseURL(addr), "http://")
	if ap, err := netip.ParseAddrPort(u); err == nil {
		return ap.Addr().String()
	}
	return "127.0.0.1"
}

// Describe says what p allows, for people: "token bucket, 100 per 1m,
// burst 20", "sliding window log, 5 per 15m, then locked out 30m,
// doubling up to 24h".
func Describe(p core.Policy) string {
	s := fmt.Sprintf("%s, %d per %s", strings.ReplaceAll(string(p.Algorithm), "_", " "), p.Limit, shortDuration(p.Window))
	if limits.IsBucket(p.Algorithm) {
		s += fmt.Sprintf(", burst %d", limits.Capacity(p.Algorithm, p.Limit, p.Burst))
	}
	if lo := p.Lockout; lo > 0 {
		s += ", then locked out " + shortDuration(lo)
		if most := limits.LockoutCap(lo, p.LockoutMax); most > lo {
			s += ", doubling up to " + shortDuration(most)
		}
		if p.LockoutMemory > 0 {
			s += fmt.Sprintf(" (offences remembered %s)", shortDuration(p.LockoutMemory))
		}
	}
	return s
}

// ordinal writes n as "1st", "2nd", "3rd", "4th", "11th", "21st"...
func ordinal(n int64) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// shellQuote quotes s for a POSIX shell when it holds anything but
// letters, digits and "/._-".
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// refillTime is how long a client that used up p waits for its whole quota
// back: the time a bucket takes to fill, or one window.
func refillTime(p core.Policy) time.Duration {
	if !limits.IsBucket(p.Algorithm) {
		return p.Window
	}
	return time.Duration(limits.Capacity(p.Algorithm, p.Limit, p.Burst)) * p.Window / time.Duration(p.Limit)
}

// shortDuration formats d without its trailing zero units: "15m", "1h",
// "1h30m", "10s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
