package openapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"

	"github.com/apigate/ratelimit/httplimit"
)

// Describe returns spec, an OpenAPI 3.0 or 3.1 document in YAML or JSON,
// with the limits of flow merged in, in spec's format: for each operation
// that layers of flow apply to, their x-ratelimit extension and its 429
// response (403 when the flow has allow or deny lists, 503 when one of
// those layers fails closed), with header fields and bodies as components;
// and the flow's quota endpoint (httplimit.WithQuota) as a path, unless
// spec has one there. Nothing else of spec is changed, its order and YAML
// comments included, but x-ratelimit, the package's own: a response,
// component or path it already has is kept, and referred to. spec may not
// refer to other files (bundle it first). A nil spec gives a new OpenAPI
// 3.1 document in YAML, of one path per layer route ("/" for a layer on
// every path), each with the layer's methods (GET for a layer on every
// method).
func Describe(flow *httplimit.Flow, spec []byte) ([]byte, error) {
	d, err := newDescriber(flow)
	if err != nil {
		return nil, err
	}
	var in *source
	var doc *openapi3.T
	if spec == nil {
		doc = d.fresh()
	} else if in, err = parse(spec); err != nil {
		return nil, err
	} else {
		doc = in.doc
	}
	d.merge(doc)
	if err := doc.Validate(context.Background(), validation...); err != nil {
		return nil, errorf("the merged document is not valid: %v", err)
	}
	return encode(doc, in)
}

// validation are the options of every check of a document: examples are
// the spec's, and not this package's to judge.
var validation = []openapi3.ValidationOption{openapi3.DisableExamplesValidation()}

// errorf returns an error of the package.
func errorf(format string, args ...any) error {
	return fmt.Errorf("openapi: "+format, args...)
}

// source is a spec as read: its model, its YAML nodes (which keep the
// order and comments that the model does not) and its format.
type source struct {
	doc  *openapi3.T
	node yaml.Node
	json bool
}

// parse reads an OpenAPI 3.0 or 3.1 document, in YAML or JSON.
func parse(spec []byte) (*source, error) {
	trimmed := bytes.TrimSpace(spec)
	if len(trimmed) == 0 {
		return nil, errorf("the spec is empty")
	}
	in := &source{json: trimmed[0] == '{'}
	if err := yaml.Unmarshal(spec, &in.node); err != nil {
		return nil, errorf("the spec is neither YAML nor JSON: %v", err)
	}
	root := in.node.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, errorf("the spec is not an OpenAPI document: its top level is not a mapping")
	}
	version, swagger := "", false
	for i := 0; i+1 < len(root.Content); i += 2 {
		switch root.Content[i].Value {
		case "openapi":
			version = root.Content[i+1].Value
		case "swagger":
			swagger = true
		}
	}
	switch {
	case version == "" && swagger:
		return nil, errorf("the spec is Swagger 2.0: convert it to OpenAPI 3.0 or 3.1 first")
	case version == "":
		return nil, errorf(`the spec is not an OpenAPI document: it has no "openapi" field`)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(spec)
	if err != nil {
		return nil, errorf("reading the spec: %v", err)
	}
	if mm := doc.OpenAPIMajorMinor(); mm != "3.0" && mm != "3.1" {
		return nil, errorf("the spec is OpenAPI %q: want 3.0 or 3.1", version)
	}
	if err := doc.Validate(context.Background(), validation...); err != nil {
		return nil, errorf("the spec is not valid OpenAPI %s: %v", version, err)
	}
	in.doc = doc
	return in, nil
}

// merge adds the limits to doc.
func (d *describer) merge(doc *openapi3.T) {
	p := parts{d: d, doc: doc}
	if doc.Paths == nil {
		doc.Paths = openapi3.NewPaths()
	}
	hasQuota := false
	for _, path := range doc.Paths.Keys() {
		item := doc.Paths.Value(path)
		if item == nil {
			continue
		}
		if d.flow.Quota != "" && sameRoute(d.flow.Quota, path) {
			hasQuota = true
		}
		ops := item.Operations()
		for _, method := range sortedKeys(ops) {
			op := ops[method]
			limits := d.limitsOf(method, path)
			if op == nil || len(limits) == 0 {
				continue
			}
			if op.Extensions == nil {
				op.Extensions = map[string]any{}
			}
			op.Extensions[extension] = limits
			if op.Responses == nil {
				op.Responses = openapi3.NewResponses()
			}
			addResponse(op, "429", p.limited())
			if d.flow.Lists {
				addResponse(op, "403", p.forbidden())
			}
			if slices.ContainsFunc(limits, func(l limit) bool { return l.FailClosed > 0 }) {
				addResponse(op, "503", p.unavailable())
			}
		}
	}
	if d.flow.Quota != "" && !hasQuota {
		doc.Paths.Set(d.flow.Quota, &openapi3.PathItem{Get: p.quota()})
	}
}

// addResponse sets op's response to status, unless op has one.
func addResponse(op *openapi3.Operation, status string, r *openapi3.ResponseRef) {
	if op.Responses.Value(status) == nil {
		op.Responses.Set(status, r)
	}
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fresh returns a document of the flow's layer routes.
func (d *describer) fresh() *openapi3.T {
	doc := &openapi3.T{
		OpenAPI: "3.1.0",
		Info: &openapi3.Info{
			Title:   "Rate limits",
			Version: "1",
			Description: "The rate limits of this API: each operation lists the limits that apply to it " +
				"in its x-ratelimit extension, and the answer to a request over one of them.",
		},
		Paths: openapi3.NewPaths(),
	}
	for _, ly := range d.flow.Layers {
		routes, methods := ly.Routes, ly.Methods
		if len(routes) == 0 {
			routes = []string{"/"}
		}
		if len(methods) == 0 {
			methods = []string{http.MethodGet}
		}
		for _, rt := range routes {
			path, params := template(rt)
			item := doc.Paths.Value(path)
			if item == nil {
				item = &openapi3.PathItem{}
				for _, name := range params {
					desc := "A path segment."
					if name == "path" && strings.HasSuffix(rt, "*") {
						desc = "Any path below " + strings.TrimSuffix(path, "/{path}") + "."
					}
					item.Parameters = append(item.Parameters, &openapi3.ParameterRef{Value: &openapi3.Parameter{
						Name: name, In: openapi3.ParameterInPath, Required: true, Description: desc,
						Schema: openapi3.NewSchemaRef("", openapi3.NewStringSchema()),
					}})
				}
				doc.Paths.Set(path, item)
			}
			for _, m := range methods {
				m = strings.ToUpper(m)
				if item.GetOperation(m) == nil {
					item.SetOperation(m, &openapi3.Operation{Summary: m + " " + path, Responses: openapi3.NewResponses()})
				}
			}
		}
	}
	return doc
}

// template returns the OpenAPI path template of a layer route, and the
// names of its parameters: "/users/:id" is "/users/{id}", "/api/*" is
// "/api/{path}".
func template(route string) (string, []string) {
	segs := strings.Split(strings.TrimPrefix(route, "/"), "/")
	var params []string
	for i, s := range segs {
		switch {
		case strings.HasPrefix(s, ":"):
			segs[i] = "{" + s[1:] + "}"
		case strings.HasPrefix(s, "*"):
			name := s[1:]
			if name == "" {
				name = "path"
			}
			segs[i] = "{" + name + "}"
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
		default:
			continue
		}
		params = append(params, strings.Trim(segs[i], "{}"))
	}
	return "/" + strings.Join(segs, "/"), params
}
