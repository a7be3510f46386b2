package npmtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// StructuredHeaders is the Structured Field Values parser (RFC 9651)
// ParseSFList runs, and its pinned version.
const (
	StructuredHeaders        = "structured-headers"
	StructuredHeadersVersion = "2.1.0"
)

// SFItem is one member of a parsed List: its bare item (a string, a
// token's text, a number or a boolean) and its parameters.
type SFItem struct {
	Value  any            `json:"value"`
	Token  bool           `json:"token"`
	Params map[string]any `json:"params"`
}

// sfScript parses process.argv[1] as a List and prints its members as
// JSON, or exits 1 with the parser's error.
const sfScript = `
const sf = require("structured-headers");
try {
  const list = sf.parseList(process.argv[1]);
  const bare = (v) => (v instanceof sf.Token ? { value: v.toString(), token: true } : { value: v, token: false });
  console.log(JSON.stringify(list.map(([v, p]) => ({ ...bare(v), params: Object.fromEntries([...p].map(([k, x]) => [k, x instanceof sf.Token ? x.toString() : x])) }))));
} catch (err) { console.error(err.message); process.exit(1); }
`

// ParseSFList parses the field lines of one field as a Structured Field
// List with the npm structured-headers parser (StructuredHeadersVersion),
// installed when missing as Install does: lines are combined as HTTP
// combines them (RFC 9110, Section 5.3). It returns an error when the
// parser refuses the value.
func ParseSFList(tb testing.TB, lines []string) ([]SFItem, error) {
	tb.Helper()
	modules := Install(tb, StructuredHeaders, StructuredHeadersVersion)
	value := strings.Join(lines, ", ")
	out, err := Node(tb, modules, sfScript, value)
	if err != nil {
		return nil, fmt.Errorf("structured-headers %s refuses %q: %w: %s", StructuredHeadersVersion, value, err, out)
	}
	var items []SFItem
	if err := json.Unmarshal([]byte(out), &items); err != nil {
		return nil, fmt.Errorf("npmtest: %q: %w", out, err)
	}
	return items, nil
}
