package client

import (
	"net/http"
	"strings"
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
// any other response with rate-limit fields releases it. Most responses
// say quota is left, and the host is not held: those are told apart
// without parsing the fields, so that pacing costs little.
func (p *pacer) observe(host string, h http.Header, now time.Time) {
	x, draft6, structured := h["X-Ratelimit-Remaining"], h["Ratelimit-Remaining"], h["Ratelimit"]
	if len(x) == 0 && len(draft6) == 0 && len(structured) == 0 {
		return
	}
	if !mayBeExhausted(x, draft6, structured) {
		p.mu.Lock()
		_, held := p.until[host]
		p.mu.Unlock()
		if !held {
			return // Parse would give a Remaining above 0, or an error: nothing to do
		}
	}
	layers, err := headers.Parse(h)
	if err != nil || len(layers) == 0 {
		return
	}
	var at time.Time
	if layers[0].Remaining == 0 { // the binding layer, which has the least
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

// mayBeExhausted reports whether the Remaining that headers.Parse reads from
// these fields may be 0: a count field made of zeros only, or a RateLimit
// field with a parameter r that may be 0 (r=0, r=00, r=-0 ...). It may say
// yes wrongly, never no: Parse's Remaining comes from one of these fields.
func mayBeExhausted(x, draft6, structured []string) bool {
	for _, vs := range [][]string{x, draft6} {
		for _, v := range vs {
			if v = strings.Trim(v, " \t"); v != "" && strings.Trim(v, "0") == "" {
				return true
			}
		}
	}
	for _, v := range structured {
		if strings.Contains(v, "r=0") || strings.Contains(v, "r=-") {
			return true
		}
	}
	return false
}
