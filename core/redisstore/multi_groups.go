package redisstore

// The layers of one request spread over several Redis Cluster slots (or
// Ring shards): one script per slot, in one pipeline, every slot checked
// before any takes (see takeGroups).

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
)

// group is the requests of a Take in one slot (or on one Ring shard).
type group struct {
	id        int   // the slot
	idx       []int // into reqs
	reqs      []core.Request
	call      *multiCall
	cmd       *redis.Cmd
	now       int64 // the time its script decided at (µs)
	admitted  bool
	committed bool
	undo      []any // the undo script's ARGV, when committed
}

// takeGroups decides reqs over a client that spreads keys: grouped by
// slotOf (by client key when nil). No script can reach two slots, so that
// a request denied by one group must take nothing in another, it goes in
// two steps, each one command per group, sent at once (runAtOnce):
//
//  1. check: every group decides without writing what an admission
//     would (modeCheck). When any group denies (or fails), that is the
//     decision, and no group took anything: a client denied on one layer
//     (a lockout, its own limit) cannot spend a shared layer's quota
//     however many requests it sends at once.
//  2. take: when every group would admit, every group decides again and
//     writes (modeUndoable). When one now denies, it lost a race with
//     another request in the moment between the two steps, and the
//     groups that admitted are undone at once (undo.lua): exactly, but
//     for a bucket's part that drained meanwhile (never more than it
//     took).
//
// So the units lost to denied requests are bounded by the requests that
// race in that moment, and given back at once, not when the window
// slides. A request whose layers all admit costs two round trips, one
// whose check denies costs one.
//
// Peeks (every request of cost 0) write nothing, so there is nothing to
// check first or undo: each group decides once, and that is the decision.
//
// It returns the time decided at, in µs. Every group takes at one time,
// so that one time dates the give-backs of all the requests, in every
// slot (see core.Store.Refund). The checks, sent at once to several
// nodes, each read their own node's TIME; the take then decides every
// group at the latest of those times, given to each group's script as an
// explicit now (setNow), at no cost of a round trip. The latest, so that
// no group takes before its own check (a window ending between the two
// would turn the check's admission into a denial), nor before an
// admission its check saw. Another request may still take on a group's
// key, at a later time, between this one's check and its take: that
// group then decides, and records its units, at that admission (see
// prelude.lua), and alias notes beside its states where the admissions
// dated now hold them, for their give-backs (a third round trip, only
// then). Moving the groups to one time instead would race the requests
// that keep taking on a busy key, and lose. That time may be ahead of a node whose clock lags the
// others', and a TTL counted from it would end that key early: so the
// take's keys live at least explicitNowMinTTL, as keys written at a
// caller's explicit time do. (The earliest of the times would need no
// such TTL, but would take before admissions on a node whose clock is
// ahead.) A call whose check denies, or of peeks, returns the latest of
// the checks' times: each group was decided at its own node's TIME, and
// nothing was admitted that a give-back could date. A caller's explicit
// now is every group's already.
func (s *Store) takeGroups(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision, slotOf func(string) int) (int64, error) {
	gs := groupBy(reqs, slotOf)
	if len(gs) == 1 {
		return s.takeOne(ctx, at, reqs, out)
	}
	calls := make([]*multiCall, len(gs))
	for k, g := range gs {
		g.call = multiPool.Get().(*multiCall)
		defer g.call.put()
		if err := s.prepare(g.call, at, g.reqs, modeCheck); err != nil {
			return 0, err
		}
		calls[k] = g.call
	}
	// 1. Check.
	admitted, err := s.runGroups(ctx, gs, calls, out, false)
	if s.afterStep != nil {
		s.afterStep()
	}
	var now int64
	for _, g := range gs {
		now = max(now, g.now)
	}
	if err != nil || !admitted || reqs[0].Cost == 0 { // peeks: all decided, nothing to take
		if err != nil {
			return 0, err
		}
		return now, nil
	}
	// 2. Take, every group at now.
	for _, g := range gs {
		g.call.args[g.call.modeAt] = modeUndoable
		if at.IsZero() {
			g.call.setNow(now, s.explicitMinTTL.Milliseconds())
		}
	}
	admitted, err = s.runGroups(ctx, gs, calls, out, true)
	if s.afterStep != nil {
		s.afterStep()
	}
	if err == nil && admitted {
		s.alias(ctx, gs, now)
		return now, nil
	}
	s.giveBack(ctx, gs)
	if err != nil {
		return 0, err
	}
	return now, nil
}

// aliasLua records where the groups of a take recorded their units, when
// not at the time the take returns (see alias.lua).
//
//go:embed alias.lua
var aliasLua string

var aliasScript = redis.NewScript(aliasLua)

// alias makes the give-backs dated now (µs), the time every group of gs
// (all committed) was given, find what each took: a group whose key's
// last admission was later than now decided, and recorded its units, at
// that admission (see prelude.lua), and records, beside its layers'
// states, that the admissions dated now hold those units there
// (alias.lua); give_back.lua gives them back from there. One script per
// such group, sent at once; none when every group recorded at now, as
// they do unless another request took on one of their keys between this
// one's check and its take. An alias that fails to be written leaves the
// units counted, as a request that does not settle leaves them, until
// their window passes: never a unit given back that was not taken.
func (s *Store) alias(ctx context.Context, gs []*group, now int64) {
	var calls []*multiCall
	for _, g := range gs {
		if g.now == now {
			continue
		}
		c := multiPool.Get().(*multiCall)
		c.sha, c.src = aliasScript.Hash(), aliasLua
		c.args[2] = int64(g.call.n)
		n := 3
		for j := range g.call.n {
			c.keys[j] = g.call.keys[keyIndex(g.call, j)]
			c.args[n] = &c.keys[j]
			n++
		}
		c.args[n], c.args[n+1] = now, g.now
		n += 2
		for j := range g.call.n {
			c.args[n] = g.reqs[j].Cost
			n++
		}
		c.nargs = n
		calls = append(calls, c)
	}
	if len(calls) == 0 {
		return
	}
	for _, cmd := range runAtOnce(ctx, s.client, calls) {
		if err := cmd.Err(); err != nil {
			s.recovery.failed(err)
			s.warn(ctx, "redisstore: a layered request could not record where some layers took their units; a give-back will leave them counted until they expire", err)
		}
	}
	for _, c := range calls {
		c.put()
	}
}

// groupBy groups reqs by slotOf (by client key when nil), in the order of
// their first requests.
func groupBy(reqs []core.Request, slotOf func(string) int) []*group {
	var gs []*group
	for j := range reqs {
		id := -1
		if slotOf != nil {
			id = slotOf(reqs[j].Key)
		}
		var g *group
		for _, h := range gs {
			if (slotOf != nil && h.id == id) || (slotOf == nil && h.reqs[0].Key == reqs[j].Key) {
				g = h
				break
			}
		}
		if g == nil {
			g = &group{id: id}
			gs = append(gs, g)
		}
		g.idx = append(g.idx, j)
		g.reqs = append(g.reqs, reqs[j])
	}
	return gs
}

// undoTimeout bounds an undo sent after its request's context had ended.
const undoTimeout = time.Second

// giveBack undoes the groups of gs that committed (see undo). When ctx
// has already ended (a node slower than the Limiter's deadline failed the
// take, and the others took), the undo is sent all the same, on a
// goroutine of its own with a context of undoTimeout, so that a slow node
// neither holds the caller past its deadline nor leaves the other slots'
// units taken until they expire. An undo is sent once, never retried: one
// whose reply was lost may have been made, and a second would give back
// more than was taken.
func (s *Store) giveBack(ctx context.Context, gs []*group) {
	calls := undoCalls(gs)
	if len(calls) == 0 {
		return
	}
	if ctx.Err() == nil {
		s.sendUndo(ctx, calls)
		return
	}
	go func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		s.sendUndo(uctx, calls)
	}()
}

// sendUndo runs the undo calls at once (runAtOnce), logs a failure, and puts
// the calls back in their pool.
func (s *Store) sendUndo(ctx context.Context, calls []*multiCall) {
	var errs []error
	for _, cmd := range runAtOnce(ctx, s.client, calls) {
		if err := cmd.Err(); err != nil {
			s.recovery.failed(err)
			errs = append(errs, err)
		}
	}
	for _, c := range calls {
		c.put()
	}
	if err := errors.Join(errs...); err != nil {
		s.warn(ctx, "redisstore: a denied layered request could not give back what some layers took; they keep it until it expires", err)
	}
}

// warn logs msg and err at the warning level, on the Store's logger.
func (s *Store) warn(ctx context.Context, msg string, err error) {
	l := s.logger
	if l == nil {
		l = slog.Default()
	}
	l.LogAttrs(ctx, slog.LevelWarn, msg, slog.String("error", err.Error()))
}

// runGroups runs the groups' calls at once (runAtOnce) and fills out from
// their replies: it reports whether every group admitted, and the groups'
// failures. take says the calls write (modeUndoable) rather than check.
func (s *Store) runGroups(ctx context.Context, gs []*group, calls []*multiCall, out []core.Decision, take bool) (bool, error) {
	cmds := runAtOnce(ctx, s.client, calls)
	var failed error
	allowed := true
	for k, g := range gs {
		g.cmd = cmds[k]
		if err := g.parse(out, take); err != nil {
			err = s.failedOn(g, out, err) // named before the reload that follows
			s.recovery.failed(err)
			failed = errors.Join(failed, err)
			continue
		}
		allowed = allowed && g.admitted
	}
	if failed != nil {
		return false, fmt.Errorf("redisstore: layers: %w", failed)
	}
	return allowed, nil
}

// parse fills out from g's reply, and g's admitted, committed and undo.
// take says the call wrote (modeUndoable) rather than checked.
func (g *group) parse(out []core.Decision, take bool) error {
	g.now, g.admitted, g.committed, g.undo = 0, false, false, g.undo[:0]
	if err := g.cmd.Err(); err != nil {
		return err
	}
	r, err := g.cmd.Slice()
	if err != nil {
		return err
	}
	c := g.call
	if len(r) < c.want {
		return fmt.Errorf("script returned %d values, want %d or more", len(r), c.want)
	}
	ints := make([]int64, c.want)
	for i := range ints {
		v, ok := r[i].(int64)
		if !ok {
			return fmt.Errorf("script returned %T at %d, want an integer", r[i], i)
		}
		ints[i] = v
	}
	ds := make([]core.Decision, c.n)
	g.now = c.decisions(ints, ds)
	g.admitted = true
	for j, d := range ds {
		out[g.idx[j]] = d
		g.admitted = g.admitted && d.Allowed
	}
	if !g.admitted || !take {
		if len(r) != c.want {
			return fmt.Errorf("script returned %d values, want %d", len(r), c.want)
		}
		return nil
	}
	// Committed: one undo record per layer, and the Redis TIME.
	if len(r) != c.want+c.n+1 {
		return fmt.Errorf("script returned %d values, want %d", len(r), c.want+c.n+1)
	}
	g.committed = true
	g.undo = append(g.undo, r[len(r)-1])
	for j := range c.n {
		rec, _ := r[c.want+j].([]any)
		if len(rec) == 0 || rec[0] == "x" {
			continue
		}
		if len(rec) != 6 {
			return fmt.Errorf("undo record of %d values, want 6", len(rec))
		}
		p := &g.reqs[j].Policy
		g.undo = append(g.undo, j, undoKind(algos[c.algo[j]].alg), rec[1], rec[2], rec[3], rec[4], rec[5],
			g.reqs[j].Cost, p.Limit, p.Window.Microseconds())
	}
	return nil
}

// undoKind is what the undo script does with a layer of algorithm a: 'l'
// removes the log's member, 'c' gives back a window counter's units, 'b'
// leaves a bucket as it is unless it can be put back exactly.
func undoKind(a core.Algorithm) string {
	switch a {
	case core.SlidingWindowLog:
		return "l"
	case core.FixedWindow:
		return "fw"
	case core.SlidingWindowCounter:
		return "swc"
	}
	return "b"
}

// undoFields is the number of ARGV per layer of undoLua.
const undoFields = 9

// undoLua undoes the writes of the layers of a committed group (see
// undo.lua).
//
//go:embed undo.lua
var undoLua string

var undoScript = redis.NewScript(undoLua)

// undoCalls returns the undo script's calls for every committed group of
// gs (see undo.lua), from the pool; they hold copies of what they need of
// the groups' calls.
func undoCalls(gs []*group) []*multiCall {
	var calls []*multiCall
	for _, g := range gs {
		if !g.committed || len(g.undo) < 2 {
			continue
		}
		c := multiPool.Get().(*multiCall)
		c.sha, c.src = undoScript.Hash(), undoLua
		n := 3
		nkeys := 0
		args := []any{g.undo[0]}
		for k := 1; k+undoFields+1 <= len(g.undo); k += undoFields + 1 {
			j := g.undo[k].(int)
			c.keys[nkeys] = g.call.keys[keyIndex(g.call, j)]
			c.args[n] = &c.keys[nkeys]
			n++
			nkeys++
			args = append(args, g.undo[k+1:k+1+undoFields]...)
		}
		c.args[2] = int64(nkeys)
		n += copy(c.args[n:], args)
		c.nargs = n
		calls = append(calls, c)
	}
	return calls
}

// keyIndex returns the index in c.keys of layer j's state key.
func keyIndex(c *multiCall, j int) int {
	k := 0
	for i := range j {
		k++
		if c.locked[i] {
			k++
		}
	}
	return k
}

// runAtOnce sends the calls' EVALSHAs at once, each as a command of
// its own on its own goroutine (its node's, in parallel: one round trip
// per node), EVAL after a NOSCRIPT, and returns their commands, in order.
// Not one go-redis pipeline: a cluster pipeline whose one node fails
// retries after a back-off that ends with the context, and then marks
// every command of the pipeline failed, the others' replies included; a
// slot that took would then have taken without the undo record its reply
// carries. Each command on its own keeps its reply, whatever another
// node does.
func runAtOnce(ctx context.Context, client redis.UniversalClient, calls []*multiCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	var wg sync.WaitGroup
	for k := range calls {
		wg.Go(func() {
			cmd := redis.NewCmd(ctx, calls[k].command(false)...)
			_ = client.Process(ctx, cmd)
			if noScript(cmd.Err()) {
				cmd = redis.NewCmd(ctx, calls[k].command(true)...)
				_ = client.Process(ctx, cmd)
			}
			cmds[k] = cmd
		})
	}
	wg.Wait()
	return cmds
}

// slot returns the Redis Cluster slot of the keys of the client key key:
// CRC16 (XMODEM) of the hash tag, the client key, modulo 16384.
func slot(key string) uint16 {
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
