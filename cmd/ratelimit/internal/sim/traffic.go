// Package sim replays traffic against rate-limit policies on the memory
// store with a virtual clock, and measures what each policy admitted.
package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Epoch is the virtual time of offset zero: a Unix-epoch-aligned instant, so
// that fixed windows start at offset 0 (the conformance suite's epoch too).
var Epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Event is one request of a trace: when, from whom, and its cost.
type Event struct {
	At   time.Time
	Key  string
	Cost int64
}

// ParseError is a bad line of a trace file, with its 1-based line and
// column.
type ParseError struct {
	Line, Col int
	Msg       string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Col, e.Msg)
}

// ParseTime reads a trace timestamp: RFC 3339 (absolute), or a decimal number
// of seconds after Epoch ("1.5" is 1.5 s), or with an "ms" suffix a number of
// milliseconds after Epoch ("1500ms").
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, fmt.Errorf("empty timestamp")
	}
	if strings.ContainsAny(s, "T:") {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("timestamp %q is not RFC 3339", s)
		}
		return t, nil
	}
	unit, num := "s", s
	if n, ok := strings.CutSuffix(s, "ms"); ok {
		unit, num = "ms", n
	}
	bad := fmt.Errorf("timestamp %q is neither RFC 3339 nor a non-negative offset in seconds (or ms)", s)
	if num == "" || strings.Count(num, ".") > 1 || strings.Trim(num, "0123456789.") != "" || num == "." {
		return time.Time{}, bad
	}
	// ParseDuration reads the decimal exactly (no float rounding).
	d, err := time.ParseDuration(num + unit)
	if err != nil || d < 0 {
		return time.Time{}, bad
	}
	return Epoch.Add(d), nil
}

func parseCost(s string) (int64, error) {
	s = strings.TrimSpace(s)
	c, err := strconv.ParseInt(s, 10, 64)
	if err != nil || c < 1 {
		return 0, fmt.Errorf("cost %q is not a positive integer", s)
	}
	return c, nil
}

// checkOrder demands non-decreasing times: a replay goes forward.
func checkOrder(prev *time.Time, t time.Time) error {
	if t.Before(*prev) {
		return fmt.Errorf("timestamp goes back in time (%s before %s): sort the trace", t.Format(time.RFC3339Nano), prev.Format(time.RFC3339Nano))
	}
	*prev = t
	return nil
}

// ParseCSV reads lines "timestamp,key[,cost]" (see ParseTime). Blank lines
// and lines starting with '#' are skipped, and so is a header row before
// the first event (a first column named timestamp, time, ts or t) and a
// byte-order mark. Times must not go back.
func ParseCSV(r io.Reader) ([]Event, error) {
	var out []Event
	var prev time.Time
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	line, data := 0, false
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			text = strings.TrimPrefix(text, "\ufeff") // a spreadsheet's byte-order mark
		}
		trim := strings.TrimSpace(text)
		if trim == "" || strings.HasPrefix(trim, "#") {
			continue
		}
		fields := strings.Split(text, ",")
		if !data && isHeader(fields) {
			data = true // a header row, before the first event: skipped
			continue
		}
		data = true
		cols := make([]int, len(fields))
		col := 1
		for i, f := range fields {
			cols[i] = col
			col += len(f) + 1
		}
		if len(fields) < 2 || len(fields) > 3 {
			return nil, &ParseError{line, 1, fmt.Sprintf("want timestamp,key[,cost], got %d fields", len(fields))}
		}
		t, err := ParseTime(fields[0])
		if err != nil {
			return nil, &ParseError{line, cols[0], err.Error()}
		}
		if err := checkOrder(&prev, t); err != nil {
			return nil, &ParseError{line, cols[0], err.Error()}
		}
		key := strings.TrimSpace(fields[1])
		if key == "" {
			return nil, &ParseError{line, cols[1], "empty key"}
		}
		cost := int64(1)
		if len(fields) == 3 {
			if cost, err = parseCost(fields[2]); err != nil {
				return nil, &ParseError{line, cols[2], err.Error()}
			}
		}
		out = append(out, Event{At: t, Key: key, Cost: cost})
	}
	if err := sc.Err(); err != nil {
		return nil, &ParseError{line + 1, 1, err.Error()}
	}
	return out, nil
}

type jsonEvent struct {
	T    json.RawMessage `json:"t"`
	Key  *string         `json:"key"`
	Cost *int64          `json:"cost"`
}

// ParseJSONL reads one object a line: {"t":...,"key":"...","cost":N}, t a
// number of seconds after Epoch or an RFC 3339 string, cost optional.
func ParseJSONL(r io.Reader) ([]Event, error) {
	var out []Event
	var prev time.Time
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		var je jsonEvent
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&je); err != nil {
			col := int(dec.InputOffset()) + 1
			var se *json.SyntaxError
			var te *json.UnmarshalTypeError
			switch {
			case asErr(err, &se):
				col = int(se.Offset)
			case asErr(err, &te):
				col = int(te.Offset)
			default:
				if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
					col = bytes.Index(b, []byte(f)) + 1
				}
			}
			return nil, &ParseError{line, max(col, 1), err.Error()}
		}
		col := bytes.Index(b, []byte(`"t"`)) + 1
		if je.T == nil {
			return nil, &ParseError{line, 1, `missing "t"`}
		}
		ts := string(je.T)
		if s, err := strconv.Unquote(ts); err == nil {
			ts = s
		}
		t, err := ParseTime(ts)
		if err != nil {
			return nil, &ParseError{line, col, err.Error()}
		}
		if err := checkOrder(&prev, t); err != nil {
			return nil, &ParseError{line, col, err.Error()}
		}
		if je.Key == nil || *je.Key == "" {
			return nil, &ParseError{line, max(bytes.Index(b, []byte(`"key"`))+1, 1), `missing or empty "key"`}
		}
		cost := int64(1)
		if je.Cost != nil {
			if *je.Cost < 1 {
				return nil, &ParseError{line, bytes.Index(b, []byte(`"cost"`)) + 1, "cost must be a positive integer"}
			}
			cost = *je.Cost
		}
		out = append(out, Event{At: t, Key: *je.Key, Cost: cost})
	}
	if err := sc.Err(); err != nil {
		return nil, &ParseError{line + 1, 1, err.Error()}
	}
	return out, nil
}

// Pattern describes a synthetic trace.
type Pattern struct {
	Name     string        // steady, burst, edge, many
	Duration time.Duration // length of the trace
	Rate     float64       // requests per second (steady, many: per client)
	Burst    int           // requests per burst (burst, edge)
	Period   time.Duration // time between bursts (burst), window length (edge)
	Clients  int           // number of clients (many)
	Seed     uint64        // seed of the jitter (many)
}

// Generate builds the trace of p, deterministic for a given p.
func Generate(p Pattern) ([]Event, error) {
	if p.Duration <= 0 {
		return nil, fmt.Errorf("pattern %s: duration must be positive", p.Name)
	}
	var out []Event
	switch p.Name {
	case "steady":
		if p.Rate <= 0 {
			return nil, fmt.Errorf("pattern steady: rate must be positive")
		}
		step := time.Duration(float64(time.Second) / p.Rate)
		for t := time.Duration(0); t < p.Duration; t += max(step, 1) {
			out = append(out, Event{At: Epoch.Add(t), Key: "client", Cost: 1})
		}
	case "burst", "edge":
		if p.Burst <= 0 || p.Period <= 0 {
			return nil, fmt.Errorf("pattern %s: burst and period must be positive", p.Name)
		}
		// burst: Burst requests at once at every period start.
		// edge: Burst requests spread over the last 5% of each period and
		// Burst more over the first 5% of the next: the fixed window's 2x.
		for start := time.Duration(0); start < p.Duration; start += p.Period {
			if p.Name == "burst" {
				for range p.Burst {
					out = append(out, Event{At: Epoch.Add(start), Key: "client", Cost: 1})
				}
				continue
			}
			edge := p.Period / 20
			for i := range 2 * p.Burst {
				at := start + p.Period - edge + time.Duration(i)*2*edge/time.Duration(2*p.Burst)
				if at < p.Duration {
					out = append(out, Event{At: Epoch.Add(at), Key: "attacker", Cost: 1})
				}
			}
		}
	case "many":
		if p.Clients <= 0 || p.Rate <= 0 {
			return nil, fmt.Errorf("pattern many: clients and rate must be positive")
		}
		rng := rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))
		n := int(p.Rate * p.Duration.Seconds() * float64(p.Clients))
		out = make([]Event, n)
		keys := make([]string, p.Clients)
		for i := range keys {
			keys[i] = "client-" + strconv.Itoa(i)
		}
		// n arrival times uniform over the trace, sorted by construction:
		// evenly spaced slots with jitter inside each slot.
		slot := float64(p.Duration) / float64(n)
		for i := range out {
			at := time.Duration((float64(i) + rng.Float64()) * slot)
			out[i] = Event{At: Epoch.Add(at), Key: keys[rng.IntN(p.Clients)], Cost: 1}
		}
	default:
		return nil, fmt.Errorf("unknown pattern %q (want steady, burst, edge or many)", p.Name)
	}
	return out, nil
}

// isHeader reports whether fields are a CSV header row: a first column
// named as a timestamp column is ("timestamp", "time", "ts" or "t", in any
// case), which no timestamp is.
func isHeader(fields []string) bool {
	switch strings.ToLower(strings.TrimSpace(fields[0])) {
	case "timestamp", "time", "ts", "t":
		return true
	}
	return false
}
