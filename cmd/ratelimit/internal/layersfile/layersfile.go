package layersfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/apigate/ratelimit/access"
	"github.com/apigate/ratelimit/core/memstore"
	"github.com/apigate/ratelimit/headers"
	"github.com/apigate/ratelimit/httplimit"
	"github.com/apigate/ratelimit/keyfuncs"
)

// file is what a layers file holds: the layers of a Flow and the options
// that change what clients are told.
type file struct {
	Layers []layer `yaml:"layers"`
	// Headers are the families of fields written: x-ratelimit, draft6,
	// structured, retry-after; absent, x-ratelimit, draft6, retry-after.
	Headers        []string `yaml:"headers"`
	ProblemDetails bool     `yaml:"problem_details"`
	Quota          string   `yaml:"quota"`
	Deny           []string `yaml:"deny"`
}

// layer is one layer of a layers file. Its policy's fields are read by
// SetPolicyField, as a --policy SPEC's are.
type layer struct {
	Policy  map[string]string `yaml:",inline"`
	Counts  string            `yaml:"counts"`
	Key     string            `yaml:"key"`
	Methods []string          `yaml:"methods"`
	Routes  []string          `yaml:"routes"`
	Costs   map[string]int64  `yaml:"costs"`
}

// layerFields are the fields of a layer that are not its policy's.
var layerFields = []string{"counts", "key", "methods", "routes", "costs"}

// counts are the Layer.Counts modes by their names in a layers file.
var counts = []struct {
	name   string
	counts httplimit.Counts
}{
	{"all", httplimit.CountAll},
	{"failures", httplimit.CountFailures},
	{"successes", httplimit.CountSuccesses},
	{"reported", httplimit.CountReported},
}

// Parse returns the Flow of a layers file, over a memory store. The
// store's janitor ends when the process does: the command describes the
// Flow and exits.
func Parse(data []byte) (*httplimit.Flow, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty layers file")
		}
		return nil, err
	}
	if len(f.Layers) == 0 {
		return nil, errors.New("no layers")
	}
	// One client address for the deny list and every key that reads it.
	ip, err := keyfuncs.NewClientIP()
	if err != nil {
		return nil, err
	}
	var layers []httplimit.Layer
	for i, ls := range f.Layers {
		ly, err := ls.layer(ip)
		if err != nil {
			return nil, fmt.Errorf("layers[%d] %q: %w", i, ls.Policy["name"], err)
		}
		layers = append(layers, ly)
	}
	opts := []httplimit.Option{httplimit.WithClientIP(ip)}
	if f.Headers != nil {
		var cfg headers.Config
		for _, h := range f.Headers {
			switch strings.ToLower(h) {
			case "x-ratelimit":
				cfg.XRateLimit = true
			case "draft6":
				cfg.Draft6 = true
			case "structured":
				cfg.Structured = true
			case "retry-after":
				cfg.RetryAfter = true
			default:
				return nil, fmt.Errorf("headers: unknown family %q (want x-ratelimit, draft6, structured, retry-after)", h)
			}
		}
		opts = append(opts, httplimit.WithHeaders(cfg))
	}
	if f.ProblemDetails {
		opts = append(opts, httplimit.WithProblemDetails())
	}
	if f.Quota != "" {
		opts = append(opts, httplimit.WithQuota(f.Quota))
	}
	if len(f.Deny) > 0 {
		var entries []access.Entry
		for _, s := range f.Deny {
			e, err := access.ParseEntry(s)
			if err != nil {
				return nil, fmt.Errorf("deny: %w", err)
			}
			entries = append(entries, e)
		}
		list, err := access.NewList(entries...)
		if err != nil {
			return nil, fmt.Errorf("deny: %w", err)
		}
		opts = append(opts, httplimit.WithDenyList(list))
	}
	store, err := memstore.New()
	if err != nil {
		return nil, err
	}
	return httplimit.New(store, layers, opts...)
}

// layer returns the httplimit.Layer of ls; ip is the flow's client
// address.
func (ls layer) layer(ip *keyfuncs.ClientIP) (httplimit.Layer, error) {
	var ly httplimit.Layer
	fields := maps.Clone(ls.Policy)
	if fields == nil {
		fields = map[string]string{}
	}
	// A layer without an algorithm has the library's default, the
	// sliding window counter (core.Policy.Algorithm).
	names := slices.Sorted(maps.Keys(fields))
	for _, field := range names { // a misspelt field before what it leaves out
		if !slices.Contains(PolicyFields, field) {
			return httplimit.Layer{}, fmt.Errorf("unknown field %q (want %s, %s)", field, strings.Join(PolicyFields, ", "), strings.Join(layerFields, ", "))
		}
	}
	for _, field := range names {
		if err := SetPolicyField(&ly.Policy, field, fields[field]); err != nil {
			return httplimit.Layer{}, err
		}
	}
	if err := ly.Policy.Validate(); err != nil {
		return httplimit.Layer{}, err
	}
	ly.Methods, ly.Routes = ls.Methods, ls.Routes
	if len(ls.Costs) > 0 {
		cost, err := httplimit.CostByRoute(ls.Costs)
		if err != nil {
			return httplimit.Layer{}, fmt.Errorf("costs: %w", err)
		}
		ly.Cost = cost
	}
	var err error
	if ly.Counts, err = countsOf(ls.Counts); err != nil {
		return httplimit.Layer{}, err
	}
	if ly.Key, err = keyOf(ls.Key, ly.Policy.Name, ip); err != nil {
		return httplimit.Layer{}, fmt.Errorf("key %q: %w", ls.Key, err)
	}
	return ly, nil
}

// countsOf returns the Counts mode of its name; "" is all.
func countsOf(name string) (httplimit.Counts, error) {
	if name == "" {
		return httplimit.CountAll, nil
	}
	names := make([]string, len(counts))
	for i, c := range counts {
		if strings.EqualFold(name, c.name) {
			return c.counts, nil
		}
		names[i] = c.name
	}
	return 0, fmt.Errorf("counts: unknown mode %q (want %s)", name, strings.Join(names, ", "))
}

// keyForms is what a bad key is told.
const keyForms = "ip, static, route, header:<Name>, user:<context key>, " +
	"parts joined with + (route+ip), alternatives with | (user:<context key>|ip)"

// keyOf returns the key function that spec says: alternatives separated
// by "|" (keyfuncs.FirstOf), each parts joined by "+" (keyfuncs.Compose),
// each part ip, static (one key, the layer's name), route,
// header:<Name> or user:<context key>. "" and "ip" are nil, the flow's
// client address, as a program leaves it.
func keyOf(spec, layer string, ip *keyfuncs.ClientIP) (keyfuncs.Func, error) {
	if spec == "" || spec == "ip" {
		return nil, nil
	}
	var alts []keyfuncs.Func
	for alt := range strings.SplitSeq(spec, "|") {
		var parts []keyfuncs.Func
		for part := range strings.SplitSeq(alt, "+") {
			fn, err := keyPart(strings.TrimSpace(part), layer, ip)
			if err != nil {
				return nil, err
			}
			parts = append(parts, fn)
		}
		fn, err := keyfuncs.Compose(parts...)
		if err != nil {
			return nil, err
		}
		alts = append(alts, fn)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return keyfuncs.FirstOf(alts...)
}

// keyPart returns the key function of one part of a key.
func keyPart(part, layer string, ip *keyfuncs.ClientIP) (keyfuncs.Func, error) {
	kind, arg, hasArg := strings.Cut(part, ":")
	switch {
	case part == "ip":
		return ip.Key, nil
	case part == "static":
		return keyfuncs.Static(layer)
	case part == "route":
		return keyfuncs.Route(), nil
	case kind == "header" && arg != "":
		return keyfuncs.APIKeyHeader(arg, nil)
	case kind == "user" && arg != "":
		return keyfuncs.User(contextUser(arg))
	case hasArg && arg == "" && (kind == "header" || kind == "user"):
		return nil, fmt.Errorf("%s: no name after %q (want %s)", part, kind+":", keyForms)
	}
	return nil, fmt.Errorf("want %s", keyForms)
}

// contextUser returns a getter for keyfuncs.User of the user ID, a string
// or a fmt.Stringer, that an authentication middleware stores in a
// request's context under the string key name.
func contextUser(name string) func(context.Context) (string, bool) {
	return func(ctx context.Context) (string, bool) {
		switch v := ctx.Value(name).(type) {
		case string:
			return v, true
		case fmt.Stringer:
			return v.String(), true
		}
		return "", false
	}
}
