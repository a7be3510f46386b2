//go:build unix

package leasefleet

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// keyWindow is one client key in one window.
type keyWindow struct {
	key    string
	window int64
}

// tallyOf is what one client got in one window.
type tallyOf struct {
	kind                        string
	admitted, searchAdmitted    int64
	clientDenied, searchDenied  int64 // 429s whose binding layer was the client's, the search's
	ambiguous                   bool  // a request sent in one window, answered in the next
	failed                      bool  // a request answered 503: the store failed, perhaps after taking
	sentSearch, sentAll, denied int64
}

// checkClients expects the per-client layers exact: no client admitted
// above its client or search limit in a window, and a client that one of
// them denied admitted exactly that layer's limit in that window. At
// least one probe of each kind must have been denied by its layer, so
// that the check is not empty.
func checkClients(t *testing.T, results []result) {
	t.Helper()
	m := map[keyWindow]*tallyOf{}
	get := func(key string, w int64, kind string) *tallyOf {
		kw := keyWindow{key, w}
		if m[kw] == nil {
			m[kw] = &tallyOf{kind: kind}
		}
		return m[kw]
	}
	for _, r := range results {
		w0, w1 := WindowOf(r.t0), WindowOf(r.t1)
		if w0 != w1 {
			// Decided in either window: neither can be checked.
			get(r.key, w0, r.kind).ambiguous = true
			get(r.key, w1, r.kind).ambiguous = true
			continue
		}
		c := get(r.key, w0, r.kind)
		c.sentAll++
		search := r.path == SearchPath
		if search {
			c.sentSearch++
		}
		switch {
		case r.status == http.StatusOK:
			c.admitted++
			if search {
				c.searchAdmitted++
			}
		case r.status == http.StatusServiceUnavailable:
			c.failed = true
		case r.status == http.StatusTooManyRequests:
			c.denied++
			switch r.limit {
			case ClientLimit:
				c.clientDenied++
			case SearchLimit:
				c.searchDenied++
			}
		}
	}
	checkExact(t, m)
}

// checkExact checks the tallies of checkClients.
func checkExact(t *testing.T, m map[keyWindow]*tallyOf) {
	t.Helper()
	exact := map[string]int{} // key-windows denied by their layer, by probe kind
	short := map[string]int{} // probe key-windows that never reached their limit
	left := 0
	for kw, c := range m {
		if c.ambiguous || c.failed {
			left++
			continue
		}
		assert.LessOrEqual(t, c.admitted, int64(ClientLimit), "%s in window %d: admitted above the client limit", kw.key, kw.window)
		assert.LessOrEqual(t, c.searchAdmitted, int64(SearchLimit), "%s in window %d: admitted above the search limit", kw.key, kw.window)
		if c.clientDenied > 0 {
			exact[c.kind]++
			assert.Equal(t, int64(ClientLimit), c.admitted, "%s in window %d: denied by the client layer, admitted %+v", kw.key, kw.window, *c)
		}
		if c.searchDenied > 0 {
			exact[c.kind]++
			assert.Equal(t, int64(SearchLimit), c.searchAdmitted, "%s in window %d: denied by the search layer, admitted %+v", kw.key, kw.window, *c)
		}
		if c.kind != "bulk" && c.clientDenied == 0 && c.searchDenied == 0 {
			short[c.kind]++
		}
	}
	t.Logf("per-client layers: %d client-probe windows and %d search-probe windows denied by their layer at exactly their limit (%d, %d); %d and %d probe windows the global layer kept below it; %d bulk windows denied by a per-client layer; %d key-windows left out (a request across a window edge, or a 503)",
		exact["client"], exact["search"], ClientLimit, SearchLimit, short["client"], short["search"], exact["bulk"], left)
	assert.Positive(t, exact["client"], "no client probe reached the client limit")
	assert.Positive(t, exact["search"], "no search probe reached the search limit")
	assert.Zero(t, exact["bulk"], "bulk clients, under their limits, denied by a per-client layer")
}
