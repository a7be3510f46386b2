package chilimit

import "net/http"

// The response has the header map in which the flow sets the rate-limit
// fields directly (httplimit matches it by method set): had the method
// drifted, the flow would fall back to Set, and allocate, without a word.
var _ interface {
	Set(key, value string)
	HeaderMap() http.Header
} = (*response)(nil)
