// Package openapi describes the rate limits of an httplimit.Flow in the
// API's OpenAPI document, for the people and tools that read it: Describe
// merges them into your OpenAPI 3.0 or 3.1 document (or writes one of its
// own), and Markdown renders a page of the limits of each operation.
//
//	doc, err := openapi.Describe(flow, spec) // spec: your openapi.yaml
//
// Each operation that a layer of the flow applies to (as the flow matches
// a request of its method to its path template) gets:
//
//   - the x-ratelimit extension below;
//   - a 429 response, components/responses/RateLimited: the header fields
//     the flow writes (components/headers/X-RateLimit-Limit,
//     RateLimit-Remaining, RateLimit, Retry-After and so on, as its
//     headers.Config says) and the body, components/schemas/RateLimitError
//     ({"error":"rate_limit_exceeded","message":...,"retry_after_seconds":N})
//     and, with httplimit.WithProblemDetails, application/problem+json,
//     components/schemas/ProblemDetails;
//   - 403, components/responses/RateLimitForbidden, when the flow has allow
//     or deny lists;
//   - 503, components/responses/RateLimitUnavailable, when one of its
//     layers fails closed (core.Policy.FailClosed).
//
// The flow's quota endpoint (httplimit.WithQuota) is added as a GET path,
// its answer as components/schemas/RateLimitQuota, unless the document
// has that path. What the document has is kept as it is, its order and
// comments included: a 429 of its own, a component of the same name.
//
// # The x-ratelimit extension
//
// x-ratelimit is a list, one item per layer that applies to the
// operation, in the flow's order; a request passes only when every one of
// them admits it. Each item has:
//
//	name         the layer's name, as in RateLimit-Policy and "violated-policies"
//	algorithm    fixed_window, sliding_window_log, sliding_window_counter,
//	             token_bucket or leaky_bucket
//	limit        requests (cost units) per window
//	window       the window, in seconds
//	burst        the bucket's capacity, of token_bucket and leaky_bucket only
//	cost         the units a request of this operation takes (1 unless the
//	             layer's Cost says otherwise, as httplimit.CostByRoute does)
//	key          who is counted: "ip" (the client's address), "static" (one
//	             count for all), "header:<Name>" (an API key or bearer token
//	             in that header), "route", several joined with
//	             "+" (keyfuncs.Compose), or "custom" (a user ID, a FirstOf, a
//	             function of your own: say what it is in the description)
//	counts       only for a layer that counts by the response
//	             (httplimit.Layer.Counts): "failures" (a login guard:
//	             only failed responses use the quota), "successes" or
//	             "reported" (the handler says what it cost)
//	lockout      only for a brute-force guard: the seconds a client is
//	             locked out at its first offence (core.Policy.Lockout)
//	fail_closed  only for a layer that fails closed: the seconds of
//	             Retry-After on its 503 while the limiter's store is down
//	lease        only for a leased layer (core.Policy.Lease): the
//	             seconds a server's share of the quota lives; its
//	             Remaining is the server's estimate of the fleet's
//
// For example:
//
//	x-ratelimit:
//	  - {name: global, algorithm: token_bucket, limit: 100, window: 60, burst: 20, cost: 1, key: ip}
//	  - {name: search, algorithm: fixed_window, limit: 10, window: 60, cost: 5, key: "header:X-Api-Key"}
//
// The key kind is told by calling the layer's key function on two made-up
// requests and reading what it read (a keyfuncs.FirstOf that falls back
// logs its one warning then). The limits described are the layers' policies: a plan that a
// core.PolicySource chooses per client is not known here. Paths are
// matched as written in the document: a servers URL's path is not added.
// The command `ratelimit openapi` does the same from a file of layers;
// docs/openapi.md is the guide.
package openapi
