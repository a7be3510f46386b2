package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/core/memstore"
)

// FleetOptions describe a fleet: Servers core.Limiters (app servers)
// sharing one memory store, each deciding requests of one global key
// under Policy, on a virtual clock from Epoch, one request at a time.
type FleetOptions struct {
	Servers int
	Policy  core.Policy // its Lease 0: every request asks the store
	// Demand is the traffic offered, a multiple of the policy's rate
	// (Limit per Window), spread evenly over each millisecond.
	Demand   float64
	Duration time.Duration
	// Skewed traffic: a fraction HotShare of the requests go to Hot
	// servers, the rest to half the others (the other half are idle), and
	// the roles are drawn again every Move.
	Hot      int
	HotShare float64
	Move     time.Duration
	// At DieAt (when above 0), a fraction Die of the servers stop being
	// sent requests: they die holding what they hold. Their traffic goes
	// to the living.
	DieAt time.Duration
	Die   float64
	Seed  uint64
}

// FleetResult is what a fleet did. Counts are request units.
type FleetResult struct {
	Policy    core.Policy
	Requests  int64
	Admitted  int64
	PerMs     []int64 // admitted in each millisecond
	OpsPerSec []int64 // store operations (Take and Refund) in each second
	Dead      int     // servers that died
	Held      int64   // what they held when they died: lost until it expires
	// Taken is what the servers took from the store (by a Take that
	// admitted), GivenBack what they gave back (what their Refunds
	// asked to: the store gives back what it can).
	Taken, GivenBack int64
	// Unreturned is what the dead took from the store and neither
	// admitted nor gave back, at the end: what their death cost the
	// store.
	Unreturned int64
}

// RunFleet runs the fleet of opt.
func RunFleet(ctx context.Context, opt FleetOptions) (FleetResult, error) {
	if err := opt.Check(); err != nil {
		return FleetResult{}, err
	}
	store, err := memstore.New()
	if err != nil {
		return FleetResult{}, err
	}
	defer store.Close()
	ops := &opsCounter{start: Epoch, now: Epoch}
	servers := make([]*core.Limiter, opt.Servers)
	views := make([]*serverStore, opt.Servers)
	for i := range servers {
		views[i] = &serverStore{Store: store, ops: ops}
		if servers[i], err = core.NewLimiter(views[i], []core.Policy{opt.Policy}); err != nil {
			return FleetResult{}, fmt.Errorf("policy %q: %w", opt.Policy.Name, err)
		}
	}
	f := fleetRun{opt: opt, servers: servers, views: views, ops: ops,
		rng:      rand.New(rand.NewPCG(opt.Seed, 0x5ca1e)),
		moves:    rand.New(rand.NewPCG(opt.Seed, 0x3073)),
		redirect: rand.New(rand.NewPCG(opt.Seed, 0xdead)),
		alive:    make([]bool, opt.Servers),
		admitted: make([]int64, opt.Servers)}
	for i := range f.alive {
		f.alive[i] = true
	}
	f.res = FleetResult{Policy: servers[0].Policies()[0], PerMs: make([]int64, opt.Duration/time.Millisecond)}
	if err := f.run(ctx); err != nil {
		return FleetResult{}, err
	}
	f.res.OpsPerSec = ops.ops
	for i, ok := range f.alive {
		f.res.Taken += views[i].given
		f.res.GivenBack += views[i].returned
		if !ok {
			f.res.Unreturned += views[i].held(f.admitted[i])
		}
	}
	return f.res, nil
}

// Check reports what is wrong with opt, if anything.
func (opt FleetOptions) Check() error {
	switch {
	case opt.Servers < 1:
		return fmt.Errorf("fleet: %d servers: want at least 1", opt.Servers)
	case opt.Demand <= 0:
		return fmt.Errorf("fleet: demand %g: want above 0", opt.Demand)
	case opt.Duration < time.Millisecond:
		return fmt.Errorf("fleet: duration %v: want at least 1ms", opt.Duration)
	case opt.Hot < 1 || opt.Hot > opt.Servers:
		return fmt.Errorf("fleet: %d hot servers: want 1 to the %d servers", opt.Hot, opt.Servers)
	case opt.HotShare < 0 || opt.HotShare > 1:
		return fmt.Errorf("fleet: hot share %g: want 0 to 1", opt.HotShare)
	case opt.Move < time.Millisecond:
		return fmt.Errorf("fleet: traffic moves every %v: want at least 1ms", opt.Move)
	case opt.Die < 0 || opt.Die >= 1:
		return fmt.Errorf("fleet: %g of the servers die: want 0 to below 1", opt.Die)
	case opt.DieAt < 0:
		return fmt.Errorf("fleet: death at %v: want 0 (none) or after the start", opt.DieAt)
	}
	return nil
}

// fleetRun is one run of a fleet.
type fleetRun struct {
	opt      FleetOptions
	servers  []*core.Limiter
	views    []*serverStore
	ops      *opsCounter
	rng      *rand.Rand // where requests go
	moves    *rand.Rand // the roles
	redirect *rand.Rand // the death, and where the dead's requests go
	living   []int
	alive    []bool
	admitted []int64 // per server
	hot      []int
	warm     []int
	res      FleetResult
}

func (f *fleetRun) run(ctx context.Context) error {
	p := f.res.Policy
	perMs := f.opt.Demand * float64(p.Limit) / float64(p.Window.Milliseconds())
	reqs := make([]core.Request, 1)
	out := make([]core.Decision, 1)
	var acc float64
	f.roles()
	for ms := range len(f.res.PerMs) {
		at := time.Duration(ms) * time.Millisecond
		now := Epoch.Add(at)
		f.ops.now = now
		if ms > 0 && at%f.opt.Move == 0 {
			f.roles()
		}
		if f.opt.DieAt > 0 && at == f.opt.DieAt {
			f.die()
		}
		if ms%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		acc += perMs
		n := int64(acc)
		acc -= float64(n)
		for range n {
			s := f.pick()
			reqs[0] = core.Request{Key: "global", Cost: 1}
			d, _, err := f.servers[s].AllowLayers(ctx, now, reqs, out)
			if err != nil {
				return fmt.Errorf("policy %q, server %d at %v: %w", p.Name, s, at, err)
			}
			if d.Allowed {
				f.res.PerMs[ms]++
				f.admitted[s]++
			}
		}
		f.res.Requests += n
	}
	for _, n := range f.res.PerMs {
		f.res.Admitted += n
	}
	return nil
}

// roles draws the hot servers and the warm ones; the others are idle.
// They are drawn among all the servers, living or not, so that a run with
// a death draws the same as one without (see pick).
func (f *fleetRun) roles() {
	perm := f.moves.Perm(len(f.servers))
	hot := f.opt.Hot
	f.hot, f.warm = perm[:hot], perm[:hot]
	if hot < len(perm) {
		f.warm = perm[hot : hot+max((len(perm)-hot)/2, 1)]
	}
}

// pick is the server a request goes to. A dead server's requests go to
// another of its role drawn at random (a load balancer's health check),
// to any living server when a few draws find none, by a generator of
// their own: the requests of the living go where they would have gone.
func (f *fleetRun) pick() int {
	role := f.warm
	if f.rng.Float64() < f.opt.HotShare {
		role = f.hot
	}
	s := role[f.rng.IntN(len(role))]
	for range 8 {
		if f.alive[s] {
			return s
		}
		s = role[f.redirect.IntN(len(role))]
	}
	if f.alive[s] {
		return s
	}
	return f.living[f.redirect.IntN(len(f.living))]
}

// die kills a fraction Die of the servers, drawn at random.
func (f *fleetRun) die() {
	n := int(f.opt.Die * float64(len(f.servers)))
	for _, i := range f.redirect.Perm(len(f.servers))[:n] {
		f.alive[i] = false
		f.res.Held += f.views[i].held(f.admitted[i])
	}
	f.res.Dead = n
	f.living = f.living[:0]
	for i, ok := range f.alive {
		if ok {
			f.living = append(f.living, i)
		}
	}
}
