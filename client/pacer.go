package client

import (
	"net/http"
	"sync"
	"time"

	"github.com/apigate/ratelimit/headers"
)

// pacer remembers, per host, until when the last response said no quota
// was left. It holds at most max hosts.
type pacer struct {
	mu    sync.Mutex
	max   int
	until map[string]time.Time
}

func newPacer(maxHosts int) *pacer {
	return &pacer{max: maxHosts, until: make(map[string]time.Time)}
}

// delay is how long a request to host, sent at now, should wait.
func (p *pacer) delay(host string, now time.Time) time.Duration {
	p.mu.Lock()
	at, ok := p.until[host]
	if ok && !at.After(now) {
		delete(p.until, host)
		ok = false
	}
	p.mu.Unlock()
	if !ok {
		return 0
	}
	return at.Sub(now)
}

// observe records the rate-limit fields of a response from host received
// at now: a Remaining of 0 with a positive reset holds the host until then;
// any other response with rate-limit fields releases it.
func (p *pacer) observe(host string, h http.Header, now time.Time) {
	if h.Get(headers.XRateLimitRemaining) == "" && h.Get(headers.RateLimitRemaining) == "" && h.Get(headers.RateLimit) == "" {
		return
	}
	info, err := headers.Parse(h)
	if err != nil {
		return
	}
	var at time.Time
	if info.Remaining == 0 {
		d, told := serverWait(h, now)
		if told {
			at = now.Add(d)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if at.IsZero() {
		delete(p.until, host)
		return
	}
	if _, ok := p.until[host]; !ok && len(p.until) >= p.max {
		for k, v := range p.until {
			if !v.After(now) {
				delete(p.until, k)
			}
		}
		for k := range p.until {
			if len(p.until) < p.max {
				break
			}
			delete(p.until, k)
		}
	}
	p.until[host] = at
}
