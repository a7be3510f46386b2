package openapi

import (
	"github.com/getkin/kin-openapi/openapi3"
)

// Names of the components the package adds under components/.
const (
	respLimited     = "RateLimited"          // 429
	respForbidden   = "RateLimitForbidden"   // 403, deny lists
	respUnavailable = "RateLimitUnavailable" // 503, FailClosed
	schemaError     = "RateLimitError"       // the default JSON bodies
	schemaProblem   = "ProblemDetails"       // RFC 9457, WithProblemDetails
	schemaQuota     = "RateLimitQuota"       // the quota endpoint's answer

	contentJSON    = "application/json"
	contentProblem = "application/problem+json"
)

// A header field the flow writes, as components/headers/<name>.
type headerField struct {
	name, description string
	integer           bool
}

// headerFields returns the fields the flow writes on a refusal (429),
// in the order the headers package writes them.
func (d *describer) headerFields() []headerField {
	h := d.flow.Headers
	var out []headerField
	if h.XRateLimit {
		out = append(out,
			headerField{"X-RateLimit-Limit", "The capacity of the binding limit: its policy's limit, a bucket's burst, in cost units.", true},
			headerField{"X-RateLimit-Remaining", "What is left of the binding limit, in cost units.", true},
			headerField{"X-RateLimit-Reset", "The Unix time, in seconds, at which the binding limit is whole again.", true})
	}
	if h.Draft6 {
		out = append(out,
			headerField{"RateLimit-Limit", "The capacity of the binding limit, as in draft-ietf-httpapi-ratelimit-headers-06.", true},
			headerField{"RateLimit-Remaining", "What is left of the binding limit, in cost units (draft 6).", true},
			headerField{"RateLimit-Reset", "The seconds until the binding limit is whole again (draft 6).", true})
	}
	if h.Structured {
		out = append(out,
			headerField{"RateLimit", `Every limit that applied, as Structured Fields (draft-ietf-httpapi-ratelimit-headers-10): "name";r=<remaining>;t=<seconds to reset>.`, false},
			headerField{"RateLimit-Policy", `The policies of the limits that applied, as Structured Fields: "name";q=<quota>;w=<window in seconds>.`, false})
	}
	if h.RetryAfter {
		out = append(out, retryAfter)
	}
	return out
}

// retryAfter is the Retry-After field, which a 503 of FailClosed carries too.
var retryAfter = headerField{"Retry-After", "The seconds to wait before the request can pass (RFC 9110), at least 1.", true}

// headerComponent is the component of a field.
func headerComponent(f headerField) *openapi3.Header {
	s := openapi3.NewStringSchema()
	if f.integer {
		s = openapi3.NewIntegerSchema().WithMin(0)
	}
	return &openapi3.Header{Parameter: openapi3.Parameter{
		Description: f.description,
		Schema:      openapi3.NewSchemaRef("", s),
	}}
}

// errorSchema is the body of DefaultResponder's answers, and of the quota
// endpoint's refusals.
func errorSchema() *openapi3.Schema {
	s := openapi3.NewObjectSchema().
		WithProperty("error", openapi3.NewStringSchema()).
		WithProperty("message", openapi3.NewStringSchema()).
		WithProperty("retry_after_seconds", openapi3.NewIntegerSchema().WithMin(1)).
		WithRequired([]string{"error"})
	s.Description = `A refusal by the rate limiter: "error" is a code (rate_limit_exceeded on 429, ` +
		`rate_limit_unavailable on 503, forbidden on 403), "message" says it to a person, and ` +
		`"retry_after_seconds", on 429 and 503, is the Retry-After value.`
	return s
}

// problemSchema is the problem details body (RFC 9457) of WithProblemDetails.
func problemSchema() *openapi3.Schema {
	s := openapi3.NewObjectSchema().
		WithProperty("type", openapi3.NewStringSchema().WithFormat("uri")).
		WithProperty("title", openapi3.NewStringSchema()).
		WithProperty("status", openapi3.NewIntegerSchema()).
		WithProperty("detail", openapi3.NewStringSchema()).
		WithProperty("violated-policies", openapi3.NewArraySchema().WithItems(openapi3.NewStringSchema())).
		WithRequired([]string{"type", "title", "status"})
	s.Description = "Problem details (RFC 9457), for a client that asks for application/problem+json, " +
		"with the problem types of the IETF RateLimit draft (quota-exceeded, abnormal-usage-detected, " +
		"temporary-reduced-capacity; about:blank on 403). \"violated-policies\" names the limits that " +
		"refused the request, the binding one first."
	return s
}

// quotaSchema is the answer of the quota endpoint.
func quotaSchema() *openapi3.Schema {
	integer := func(desc string) *openapi3.Schema {
		s := openapi3.NewIntegerSchema()
		s.Description = desc
		return s
	}
	strings := openapi3.NewArraySchema().WithItems(openapi3.NewStringSchema())
	layer := openapi3.NewObjectSchema().
		WithProperty("name", openapi3.NewStringSchema()).
		WithProperty("algorithm", openapi3.NewStringSchema()).
		WithProperty("limit", integer("The most remaining can be (a bucket's burst).")).
		WithProperty("remaining", integer("What is left now, in cost units.")).
		WithProperty("used", integer("limit less remaining.")).
		WithProperty("reset", integer("The Unix time, in seconds, at which remaining is whole again.")).
		WithProperty("reset_after", integer("The seconds until then.")).
		WithProperty("window", openapi3.NewFloat64Schema()).
		WithProperty("retry_after", integer("Only when a request of cost 1 would be refused now: the seconds until one passes.")).
		WithProperty("locked_out", openapi3.NewBoolSchema()).
		WithProperty("methods", strings).
		WithProperty("routes", strings).
		WithRequired([]string{"name", "algorithm", "limit", "remaining", "used", "reset", "reset_after", "window"})
	s := openapi3.NewObjectSchema().
		WithProperty("layers", openapi3.NewArraySchema().WithItems(layer)).
		WithRequired([]string{"layers"})
	s.Description = "The caller's quota under every limit that keys it, read without spending any."
	return s
}

// parts adds the package's components to doc, each once, and refers to
// them. A component doc already has under the same name is kept: the
// spec's own wins.
type parts struct {
	d   *describer
	doc *openapi3.T
}

// components returns doc's components, made when it has none.
func (p *parts) components() *openapi3.Components {
	if p.doc.Components == nil {
		p.doc.Components = &openapi3.Components{}
	}
	return p.doc.Components
}

// schema refers to components/schemas/name, made by build if missing.
func (p *parts) schema(name string, build func() *openapi3.Schema) *openapi3.SchemaRef {
	c := p.components()
	if c.Schemas == nil {
		c.Schemas = openapi3.Schemas{}
	}
	if c.Schemas[name] == nil {
		c.Schemas[name] = &openapi3.SchemaRef{Value: build()}
	}
	return &openapi3.SchemaRef{Ref: "#/components/schemas/" + name, Value: c.Schemas[name].Value}
}

// headers refers to components/headers/<name> of each field, made if
// missing.
func (p *parts) headers(fields ...headerField) openapi3.Headers {
	if len(fields) == 0 {
		return nil
	}
	c := p.components()
	if c.Headers == nil {
		c.Headers = openapi3.Headers{}
	}
	out := openapi3.Headers{}
	for _, f := range fields {
		if c.Headers[f.name] == nil {
			c.Headers[f.name] = &openapi3.HeaderRef{Value: headerComponent(f)}
		}
		out[f.name] = &openapi3.HeaderRef{Ref: "#/components/headers/" + f.name, Value: c.Headers[f.name].Value}
	}
	return out
}

// response refers to components/responses/name, made by build if missing.
func (p *parts) response(name string, build func() *openapi3.Response) *openapi3.ResponseRef {
	c := p.components()
	if c.Responses == nil {
		c.Responses = openapi3.ResponseBodies{}
	}
	if c.Responses[name] == nil {
		c.Responses[name] = &openapi3.ResponseRef{Value: build()}
	}
	return &openapi3.ResponseRef{Ref: "#/components/responses/" + name, Value: c.Responses[name].Value}
}

// bodies is the content of a refusal: the default JSON body, and problem
// details when the flow gives them, with an example of each.
func (p *parts) bodies(jsonExample, problemExample map[string]any) openapi3.Content {
	content := openapi3.Content{contentJSON: &openapi3.MediaType{
		Schema: p.schema(schemaError, errorSchema), Example: jsonExample,
	}}
	if p.d.flow.Problems {
		content[contentProblem] = &openapi3.MediaType{
			Schema: p.schema(schemaProblem, problemSchema), Example: problemExample,
		}
	}
	return content
}

// The problem types of the IETF RateLimit draft.
const (
	problemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// limited is the 429 response.
func (p *parts) limited() *openapi3.ResponseRef {
	return p.response(respLimited, func() *openapi3.Response {
		r := openapi3.NewResponse().WithDescription("Too many requests: a limit that applies to this operation " +
			"(see its x-ratelimit) is spent. Retry after the seconds Retry-After says.")
		r.Headers = p.headers(p.d.headerFields()...)
		r.Content = p.bodies(
			map[string]any{"error": "rate_limit_exceeded", "message": "Too many requests, retry after 30 seconds.", "retry_after_seconds": 30},
			map[string]any{"type": problemQuotaExceeded, "title": "Quota Exceeded", "status": 429,
				"detail": "Too many requests, retry after 30 seconds.", "violated-policies": []string{"global"}})
		return r
	})
}

// forbidden is the 403 response of a deny-listed client.
func (p *parts) forbidden() *openapi3.ResponseRef {
	return p.response(respForbidden, func() *openapi3.Response {
		r := openapi3.NewResponse().WithDescription("Forbidden: the client is on a deny list. " +
			"No rate-limit field is sent, nor why.")
		r.Content = p.bodies(
			map[string]any{"error": "forbidden", "message": "Access denied."},
			map[string]any{"type": "about:blank", "title": "Forbidden", "status": 403, "detail": "Access denied."})
		return r
	})
}

// unavailable is the 503 response of a layer that fails closed.
func (p *parts) unavailable() *openapi3.ResponseRef {
	return p.response(respUnavailable, func() *openapi3.Response {
		r := openapi3.NewResponse().WithDescription("Service unavailable: the rate limiter cannot decide, " +
			"and a limit of this operation fails closed (its fail_closed in x-ratelimit). " +
			"Retry after the seconds Retry-After says.")
		if p.d.flow.Headers.RetryAfter {
			r.Headers = p.headers(retryAfter)
		}
		r.Content = p.bodies(
			map[string]any{"error": "rate_limit_unavailable", "message": "Rate limiting is temporarily unavailable, retry after 5 seconds.", "retry_after_seconds": 5},
			map[string]any{"type": problemReducedCapacity, "title": "Temporary Reduced Capacity", "status": 503,
				"detail": "Rate limiting is temporarily unavailable, retry after 5 seconds.", "violated-policies": []string{"login"}})
		return r
	})
}

// quota is the GET operation of the flow's quota endpoint.
func (p *parts) quota() *openapi3.Operation {
	errBody := func(example string) openapi3.Content {
		return openapi3.Content{contentJSON: &openapi3.MediaType{
			Schema: p.schema(schemaError, errorSchema), Example: map[string]any{"error": example},
		}}
	}
	ok := openapi3.NewResponse().WithDescription("The caller's quota under every limit that keys it, " +
		"as the limiter keys it; nothing is spent.")
	ok.Content = openapi3.Content{contentJSON: &openapi3.MediaType{Schema: p.schema(schemaQuota, quotaSchema)}}
	ok.Headers = openapi3.Headers{"Cache-Control": &openapi3.HeaderRef{Value: &openapi3.Header{Parameter: openapi3.Parameter{
		Description: "no-store", Schema: openapi3.NewSchemaRef("", openapi3.NewStringSchema()),
	}}}}
	flood := openapi3.NewResponse().WithDescription("Too many quota requests from this client address.")
	flood.Content = errBody("too many quota requests")
	flood.Headers = p.headers(retryAfter)
	down := openapi3.NewResponse().WithDescription("The quota cannot be read now: the store failed.")
	down.Content = errBody("quota unavailable")
	down.Headers = p.headers(retryAfter)
	op := &openapi3.Operation{
		Summary: "Where the caller stands",
		Description: "The caller's quota under every rate limit, as GitHub's GET /rate_limit: " +
			"answered by the rate limiter itself, spending nothing.",
		Responses: openapi3.NewResponses(),
	}
	op.Responses.Set("200", &openapi3.ResponseRef{Value: ok})
	op.Responses.Set("429", &openapi3.ResponseRef{Value: flood})
	op.Responses.Set("503", &openapi3.ResponseRef{Value: down})
	if p.d.flow.Lists {
		op.Responses.Set("403", p.forbidden())
	}
	return op
}
