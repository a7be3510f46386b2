package openapi

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apigate/ratelimit/httplimit"
)

// Markdown returns a page, in Markdown, of the limits of flow on each
// operation of spec (as Describe finds them: a table per operation), and
// of what a client over one is answered. A nil spec describes the
// operations of the document Describe would write without one.
func Markdown(flow *httplimit.Flow, spec []byte) ([]byte, error) {
	d, err := newDescriber(flow)
	if err != nil {
		return nil, err
	}
	doc := d.fresh()
	if spec != nil {
		in, err := parse(spec)
		if err != nil {
			return nil, err
		}
		doc = in.doc
	}
	var b bytes.Buffer
	title := "Rate limits"
	if doc.Info != nil && doc.Info.Title != "" && spec != nil {
		title += " of " + doc.Info.Title
	}
	fmt.Fprintf(&b, "# %s\n\n", title)
	d.preamble(&b)
	var free []string
	for _, path := range sortedKeys(doc.Paths.Map()) {
		ops := doc.Paths.Value(path).Operations()
		methods := sortedKeys(ops)
		slices.SortStableFunc(methods, func(a, b string) int { return methodRank(a) - methodRank(b) })
		for _, m := range methods {
			op := ops[m]
			limits := d.limitsOf(m, path)
			if len(limits) == 0 {
				free = append(free, "`"+m+" "+path+"`")
				continue
			}
			fmt.Fprintf(&b, "## %s %s\n\n", m, path)
			if op.Summary != "" && op.Summary != m+" "+path {
				fmt.Fprintf(&b, "%s\n\n", op.Summary)
			}
			b.WriteString("| limit | algorithm | rate | burst | cost | key | notes |\n|---|---|---|---|---|---|---|\n")
			for _, l := range limits {
				burst := "-"
				if l.Burst > 0 {
					burst = strconv.FormatInt(l.Burst, 10)
				}
				var notes []string
				if l.Counts != "" {
					notes = append(notes, "counts "+l.Counts+" only")
				}
				if l.Lockout > 0 {
					notes = append(notes, "over it, locked out for "+span(l.Lockout)+" or more")
				}
				if l.FailClosed > 0 {
					notes = append(notes, "fails closed: 503 while the limiter is down")
				}
				note := strings.Join(notes, "; ")
				if note == "" {
					note = "-"
				}
				fmt.Fprintf(&b, "| %s | %s | %d per %s | %s | %d | `%s` | %s |\n",
					l.Name, strings.ReplaceAll(l.Algorithm, "_", " "), l.Limit, per(l.Window), burst, l.Cost, l.Key, note)
			}
			b.WriteString("\n")
		}
	}
	if len(free) > 0 {
		fmt.Fprintf(&b, "## Not limited\n\n%s.\n", strings.Join(free, ", "))
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// preamble writes what every limited operation shares: how limits
// combine, and what a refused client is answered.
func (d *describer) preamble(b *bytes.Buffer) {
	b.WriteString("A request is counted by every limit of its operation, and passes only when all of them admit it; " +
		"a refused request spends nothing. `cost` is what a request takes from the limit; " +
		"`key` is who is counted: `ip` the client's address, `header:<Name>` the API key in that header.\n\n")
	b.WriteString("Over a limit, a client gets `429 Too Many Requests`")
	var names []string
	for _, f := range d.headerFields() {
		names = append(names, "`"+f.name+"`")
	}
	if len(names) > 0 {
		fmt.Fprintf(b, " with %s", strings.Join(names, ", "))
	}
	b.WriteString(", and `{\"error\":\"rate_limit_exceeded\",\"message\":\"...\",\"retry_after_seconds\":N}`")
	if d.flow.Problems {
		b.WriteString(" (problem details, `application/problem+json`, to a client that asks for them)")
	}
	b.WriteString(".")
	if d.flow.Lists {
		b.WriteString(" A client on a deny list gets `403 Forbidden`.")
	}
	if d.flow.Quota != "" {
		fmt.Fprintf(b, " `GET %s` tells a client where it stands under each limit, spending nothing.", d.flow.Quota)
	}
	b.WriteString("\n\n")
}

// methodRank orders methods as an API's reference does.
func methodRank(m string) int {
	if i := slices.Index([]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"}, m); i >= 0 {
		return i
	}
	return 8
}

// per is a window said after "per": "minute", "15 minutes", "500ms".
func per(window float64) string {
	for _, u := range []struct {
		secs float64
		name string
	}{{86400, "day"}, {3600, "hour"}, {60, "minute"}, {1, "second"}} {
		if window == u.secs {
			return u.name
		}
		if n := window / u.secs; n >= 1 && n == float64(int64(n)) {
			return strconv.FormatInt(int64(n), 10) + " " + u.name + "s"
		}
	}
	return span(window)
}

// span is a duration in seconds, as time.Duration writes it, without
// its zero units: "30m", "1h30m", "500ms".
func span(secs float64) string {
	s := time.Duration(secs * float64(time.Second)).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
