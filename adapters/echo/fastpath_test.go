package echolimit

import "net/http"

// The response reaches headers.Writer's fast path for a header map, which
// headers matches by method set: had the method drifted, the writer would
// fall back to Set, and allocate, without a word.
var _ interface {
	Set(key, value string)
	HeaderMap() http.Header
} = response{}
