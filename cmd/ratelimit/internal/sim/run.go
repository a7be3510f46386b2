package sim

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

// Options tune a Run.
type Options struct {
	// Window is the length W of the sliding window in which Result.Worst is
	// measured; 0 means the policy's own Window.
	Window time.Duration
	// TopKeys is how many keys Result.Keys lists, most denied first.
	TopKeys int
	// Bucket is the width of a Series point; 0 means no series.
	Bucket time.Duration
	// Decisions keeps every Decision in Result.Decisions.
	Decisions bool
	// Progress, when set, is called now and then with the events done.
	Progress func(policy string, done, total int)
}

// KeyResult counts one client's requests.
type KeyResult struct {
	Key      string `json:"key"`
	Admitted int64  `json:"admitted"`
	Denied   int64  `json:"denied"`
	// Worst is the most units admitted to this key in any window of
	// Result.WorstWindow.
	Worst int64 `json:"worst"`
	// FirstDenial is the offset from Epoch of this key's first denial, -1
	// if none.
	FirstDenial time.Duration `json:"first_denial"`
}

// Point is one bucket of the series: request units offered and admitted in
// [At, At+Bucket). Admitted units of the leaky bucket are counted when they
// leave the queue (arrival + Decision.Delay).
type Point struct {
	At       time.Duration `json:"at"`
	Offered  int64         `json:"offered"`
	Admitted int64         `json:"admitted"`
}

// Result is what one policy did with the trace. Counts are request units
// (cost), not requests.
type Result struct {
	Policy   core.Policy `json:"policy"`
	Offered  int64       `json:"offered"`
	Admitted int64       `json:"admitted"`
	Denied   int64       `json:"denied"`
	// Worst is the most units admitted to one key in any sliding window
	// (t-W, t] of length WorstWindow: what the limit, which is per key,
	// let one client have at worst.
	Worst       int64         `json:"worst"`
	WorstWindow time.Duration `json:"worst_window"`
	// FirstDenial is the offset from Epoch of the first denial, -1 if none.
	FirstDenial time.Duration   `json:"first_denial"`
	Keys        []KeyResult     `json:"keys,omitempty"`
	Series      []Point         `json:"series,omitempty"`
	Decisions   []core.Decision `json:"-"`
}

// Run replays events against each policy on its own memory store, with the
// events' times as the clock.
func Run(ctx context.Context, policies []core.Policy, events []Event, opt Options) ([]Result, error) {
	out := make([]Result, 0, len(policies))
	for _, p := range policies {
		r, err := runOne(ctx, p, events, opt)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func runOne(ctx context.Context, p core.Policy, events []Event, opt Options) (Result, error) {
	store, err := memstore.New()
	if err != nil {
		return Result{}, err
	}
	defer store.Close()
	lim, err := core.NewLimiter(store, []core.Policy{p})
	if err != nil {
		return Result{}, fmt.Errorf("policy %q: %w", p.Name, err)
	}
	p = lim.Policies()[0]
	res := Result{Policy: p, FirstDenial: -1, WorstWindow: cmp.Or(opt.Window, p.Window)}
	type counts struct {
		admitted, denied int64
		firstDenial      time.Duration
		recent           window
	}
	perKey := map[string]*counts{}
	var admits []admit
	if opt.Decisions {
		res.Decisions = make([]core.Decision, 0, len(events))
	}
	var start time.Time
	if len(events) > 0 {
		start = events[0].At
	}
	for i, ev := range events {
		if i&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
			if opt.Progress != nil {
				opt.Progress(p.Name, i, len(events))
			}
		}
		d, err := lim.AllowN(ctx, ev.Key, ev.Cost, ev.At)
		if err != nil {
			return Result{}, fmt.Errorf("policy %q, request %d (key %q at %s): %w", p.Name, i+1, ev.Key, ev.At.Format(time.RFC3339Nano), err)
		}
		if opt.Decisions {
			res.Decisions = append(res.Decisions, d)
		}
		c := perKey[ev.Key]
		if c == nil {
			c = &counts{firstDenial: -1}
			perKey[ev.Key] = c
		}
		res.Offered += ev.Cost
		if d.Allowed {
			res.Admitted += ev.Cost
			c.admitted += ev.Cost
			c.recent.add(ev.At, ev.Cost, res.WorstWindow)
			res.Worst = max(res.Worst, c.recent.worst)
			if opt.Bucket > 0 {
				admits = append(admits, admit{ev.At.Add(d.Delay), ev.Cost})
			}
		} else {
			res.Denied += ev.Cost
			c.denied += ev.Cost
			if c.firstDenial < 0 {
				c.firstDenial = ev.At.Sub(Epoch)
			}
			if res.FirstDenial < 0 {
				res.FirstDenial = c.firstDenial
			}
		}
	}
	if opt.TopKeys > 0 {
		for k, c := range perKey {
			res.Keys = append(res.Keys, KeyResult{k, c.admitted, c.denied, c.recent.worst, c.firstDenial})
		}
		slices.SortFunc(res.Keys, func(a, b KeyResult) int {
			return cmp.Or(cmp.Compare(b.Denied, a.Denied), cmp.Compare(b.Admitted, a.Admitted), cmp.Compare(a.Key, b.Key))
		})
		res.Keys = res.Keys[:min(len(res.Keys), opt.TopKeys)]
	}
	if opt.Bucket > 0 && len(events) > 0 {
		res.Series = series(start, events, admits, opt.Bucket)
	}
	return res, nil
}

type admit struct {
	out  time.Time // when it leaves (arrival + Delay)
	cost int64
}

// window holds one key's admitted units in the last W, to find the most
// admitted in any (t-W, t].
type window struct {
	at    []time.Time
	cost  []int64
	head  int
	sum   int64
	worst int64
}

func (w *window) add(at time.Time, cost int64, width time.Duration) {
	w.at = append(w.at, at)
	w.cost = append(w.cost, cost)
	w.sum += cost
	for at.Sub(w.at[w.head]) >= width {
		w.sum -= w.cost[w.head]
		w.head++
	}
	if w.head > 64 && w.head*2 > len(w.at) { // compact
		w.at = append(w.at[:0], w.at[w.head:]...)
		w.cost = append(w.cost[:0], w.cost[w.head:]...)
		w.head = 0
	}
	w.worst = max(w.worst, w.sum)
}

func series(start time.Time, events []Event, admits []admit, bucket time.Duration) []Point {
	end := events[len(events)-1].At
	for _, a := range admits {
		if a.out.After(end) {
			end = a.out
		}
	}
	n := int(end.Sub(start)/bucket) + 1
	pts := make([]Point, n)
	for i := range pts {
		pts[i].At = start.Sub(Epoch) + time.Duration(i)*bucket
	}
	for _, ev := range events {
		pts[int(ev.At.Sub(start)/bucket)].Offered += ev.Cost
	}
	for _, a := range admits {
		pts[int(a.out.Sub(start)/bucket)].Admitted += a.cost
	}
	return pts
}
