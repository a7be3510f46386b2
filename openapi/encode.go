package openapi

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"
)

// encode writes doc in the format of in (YAML when in is nil), in the
// order of in's keys, with its comments and scalar styles: the model
// writes maps, in sorted order, so the document is written by the model
// and then laid out as in was. Keys in is without come after its own, in
// the model's order.
func encode(doc *openapi3.T, in *source) ([]byte, error) {
	b, err := doc.MarshalJSON()
	if err != nil {
		return nil, errorf("writing the document: %v", err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return nil, errorf("writing the document: %v", err)
	}
	plain(&n)
	if in != nil {
		layOut(&n, &in.node)
	} else {
		tidy(&n)
	}
	if in != nil && in.json {
		var out bytes.Buffer
		writeJSON(&out, n.Content[0], "")
		out.WriteByte('\n')
		return out.Bytes(), nil
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, errorf("writing the document: %v", err)
	}
	if err := enc.Close(); err != nil {
		return nil, errorf("writing the document: %v", err)
	}
	return out.Bytes(), nil
}

// plain clears the styles that decoding JSON gave n (every string
// quoted, every collection in flow style), so that YAML is written in
// block style with strings quoted only where they must be.
func plain(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plain(c)
	}
}

// layOut orders the mappings of n as those of o, the same document before
// the merge, and gives n o's comments and styles where the two agree.
func layOut(n, o *yaml.Node) {
	for o.Kind == yaml.AliasNode && o.Alias != nil {
		o = o.Alias
	}
	if n.Kind != o.Kind {
		tidy(n)
		return
	}
	n.HeadComment, n.LineComment, n.FootComment = o.HeadComment, o.LineComment, o.FootComment
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 1 && len(o.Content) == 1 {
			layOut(n.Content[0], o.Content[0])
		}
	case yaml.ScalarNode:
		if n.Value == o.Value {
			n.Style = o.Style
		}
	case yaml.SequenceNode:
		n.Style = o.Style
		for i := range min(len(n.Content), len(o.Content)) {
			layOut(n.Content[i], o.Content[i])
		}
	case yaml.MappingNode:
		n.Style = o.Style
		at := map[string]int{}
		for i := 0; i+1 < len(o.Content); i += 2 {
			at[o.Content[i].Value] = i
		}
		var known, added []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if _, ok := at[n.Content[i].Value]; ok {
				known = append(known, n.Content[i], n.Content[i+1])
			} else {
				added = append(added, n.Content[i], n.Content[i+1])
			}
		}
		pairs := make([][2]*yaml.Node, 0, len(known)/2)
		for i := 0; i < len(known); i += 2 {
			pairs = append(pairs, [2]*yaml.Node{known[i], known[i+1]})
		}
		slices.SortStableFunc(pairs, func(a, b [2]*yaml.Node) int { return at[a[0].Value] - at[b[0].Value] })
		content := make([]*yaml.Node, 0, len(n.Content))
		for _, p := range pairs {
			j := at[p[0].Value]
			layOut(p[0], o.Content[j])
			layOut(p[1], o.Content[j+1])
			content = append(content, p[0], p[1])
		}
		for i := 1; i < len(added); i += 2 {
			tidy(added[i])
		}
		n.Content = append(content, added...)
	}
}

// tidy orders the mappings of n, which has no counterpart in the spec.
func tidy(n *yaml.Node) {
	for _, c := range n.Content {
		tidy(c)
	}
	if n.Kind != yaml.MappingNode {
		return
	}
	// What a thing is comes before its details; other keys follow in
	// the model's order.
	first := []string{"openapi", "info", "title", "version", "name", "in", "summary", "description",
		"operationId", "required", "type", "format", "minimum", "parameters", "schema", "headers", "content", "example"}
	rank := func(k string) int {
		if i := slices.Index(first, k); i >= 0 {
			return i
		}
		return len(first)
	}
	pairs := make([][2]*yaml.Node, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		pairs = append(pairs, [2]*yaml.Node{n.Content[i], n.Content[i+1]})
	}
	slices.SortStableFunc(pairs, func(a, b [2]*yaml.Node) int { return rank(a[0].Value) - rank(b[0].Value) })
	n.Content = n.Content[:0]
	for _, p := range pairs {
		n.Content = append(n.Content, p[0], p[1])
	}
}

// writeJSON writes n, decoded from JSON, as JSON indented by two spaces.
func writeJSON(b *bytes.Buffer, n *yaml.Node, indent string) {
	inner := indent + "  "
	switch n.Kind {
	case yaml.MappingNode:
		if len(n.Content) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteString("{\n")
		for i := 0; i+1 < len(n.Content); i += 2 {
			b.WriteString(inner)
			writeString(b, n.Content[i].Value)
			b.WriteString(": ")
			writeJSON(b, n.Content[i+1], inner)
			if i+2 < len(n.Content) {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "}")
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteString("[\n")
		for i, c := range n.Content {
			b.WriteString(inner)
			writeJSON(b, c, inner)
			if i+1 < len(n.Content) {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "]")
	default:
		if n.Tag == "!!str" {
			writeString(b, n.Value)
			return
		}
		b.WriteString(n.Value) // a JSON number, true, false or null
	}
}

// writeString writes s as a JSON string, "<" and "&" as they are.
func writeString(b *bytes.Buffer, s string) {
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.WriteString(strings.TrimSuffix(sb.String(), "\n"))
}
