package redisstore

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/limits"
	"github.com/apigate/ratelimit/internal/reqcheck"
)

//go:embed multi.lua
var multiLua string

// layerLocals are the prelude's per-request locals, as every layer's
// function declares them from its own ARGV (at offset ab), but for the
// Redis TIME, read once for all layers (shared_now in multi.lua).
const layerLocals = `  local limit, window, capacity, cost, now, min_ttl = struct.unpack('<dddddd', ARGV[ab + 1])
  if now ~= now then
    if not shared_now then
      local time = redis.call('TIME')
      shared_now = tonumber(time[1]) * 1000000 + tonumber(time[2])
    end
    now = shared_now
  end
`

// layerLockLocals is a locked variant's lockout arguments, which follow
// the six of layerLocals in the layer's packed ARGV (see packLayer), in
// place of lockout.lua's lockoutLocals.
const layerLockLocals = `  local lock_duration, lock_max, lock_memory = struct.unpack('<ddd', ARGV[ab + 1], 49)
`

// lockoutLocals is the block of lockout.lua that layerLockLocals stands
// for in a layered script: layeredSource refuses a lockout.lua without it.
const lockoutLocals = `local lock_duration = tonumber(ARGV[7])
local lock_max = tonumber(ARGV[8])
local lock_memory = tonumber(ARGV[9])
`

// packLayer writes a layer's numbers (limit, window, capacity, cost, now,
// min_ttl, then a lockout's three) into b as little-endian float64s, the
// one ARGV its function unpacks (layerLocals): one argument a layer, not
// six to nine that the script would parse one by one, which takes a
// quarter off Redis's time for a 4-layer request. Each value is the
// float64 nearest the integer, as tonumber made it of the decimal text
// (both round to nearest; below 2^53, as every limit and window is, it is
// the integer itself), so the script decides as before. now is NaN when
// the script is to read Redis's TIME.
func packLayer(b []byte, vals []int64, explicitNow bool) []byte {
	for a, v := range vals {
		f := float64(v)
		if a == 4 && !explicitNow {
			f = math.NaN()
		}
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return b
}

// deferringLua is the redis the log's script sees in a layer's function
// (see multi.lua): its writes wait in w, its reads run at once.
const deferringLua = `  local redis = {pcall = redis.pcall, call = function(command, ...)
    if command == 'ZADD' or command == 'ZREM' or command == 'PEXPIRE' or command == 'DEL' or command == 'SET' then
      local o = 4 * writes
      writes = writes + 1
      w[o + 1], w[o + 2], w[o + 3], w[o + 4] = layer, false, {command, ...}, false
      return 0
    end
    return run(command, ...)
  end}
`

// The parts of multi.lua: its runtime (multiHead), what follows each
// layer's call (multiAfter), and its end (multiTail); multiParts reports
// a multi.lua without its markers.
var multiHead, multiAfter, multiTail, multiParts = splitMulti(multiLua)

// splitMulti splits lua at the markers of multi.lua.
func splitMulti(lua string) (head, after, tail string, err error) {
	const calls, each, end = "-- The calls of the layers' functions go here", "-- after each layer\n", "-- end after each layer\n"
	i, j, k := strings.Index(lua, calls), strings.Index(lua, each), strings.Index(lua, end)
	if i < 0 || j < i || k < j {
		return "", "", "", errors.New("redisstore: multi.lua has lost its markers; update splitMulti in multi.go")
	}
	return lua[:i], lua[j+len(each) : k], lua[k+len(end):], nil
}

// layerRefs matches the KEYS[i] and ARGV[i] of an algorithm's script and
// of lockout.lua, which a layer's function reads at its offsets.
var layerRefs = regexp.MustCompile(`\b(KEYS|ARGV)\[(\d+)\]`)

// layerBody returns lua with its KEYS[i] and ARGV[i] read at a layer's
// offsets kb and ab.
func layerBody(lua string) string {
	return layerRefs.ReplaceAllStringFunc(lua, func(ref string) string {
		m := layerRefs.FindStringSubmatch(ref)
		if m[1] == "KEYS" {
			return "KEYS[kb + " + m[2] + "]"
		}
		return "ARGV[ab + " + m[2] + "]"
	})
}

// preludeLocals is the block of prelude.lua that layerLocals stands for:
// layeredSource refuses a prelude without it, so that a change to the
// prelude's arguments cannot pass unseen into the layered scripts.
const preludeLocals = `local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local min_ttl = tonumber(ARGV[6])
`

// layeredScript is the script of one combination of layers (see
// layeredSource).
type layeredScript struct {
	sha, src string
}

// layeredScripts caches the scripts by combination (layersCode).
var layeredScripts sync.Map // uint64 -> *layeredScript

// variant is the kind of a layer's script: its algorithm's index in algos,
// times two, plus one when its policy has a lockout.
func variant(i int, locked bool) int {
	v := 2 * i
	if locked {
		v++
	}
	return v
}

// layersCode packs variants (at most 16, each below 15) into
// one number, four bits each.
func layersCode(vs []int) uint64 {
	var code uint64
	for j, v := range vs {
		code |= uint64(v+1) << (4 * j)
	}
	return code
}

// scriptFor returns the script of variants, generating it at its first
// use.
func scriptFor(vs []int) (*layeredScript, error) {
	code := layersCode(vs)
	if ls, ok := layeredScripts.Load(code); ok {
		return ls.(*layeredScript), nil
	}
	src, err := layeredSource(vs)
	if err != nil {
		return nil, err
	}
	sc := redis.NewScript(src)
	ls, _ := layeredScripts.LoadOrStore(code, &layeredScript{sha: sc.Hash(), src: src})
	return ls.(*layeredScript), nil
}

// layeredSource returns the script deciding one layer per variant in vs,
// in order (see multi.lua): the prelude without its per-request locals,
// multi.lua's runtime, one function per variant (its KEYS and ARGV read
// at the layer's offsets, layerBody), the calls, each followed by
// multi.lua's code for after a layer, and multi.lua's end.
func layeredSource(vs []int) (string, error) {
	i := strings.Index(preludeLua, preludeLocals)
	if i < 0 {
		return "", errors.New("redisstore: prelude.lua has changed its per-request locals; update layerLocals in multi.go")
	}
	var b strings.Builder
	b.WriteString(preludeLua[:i])
	b.WriteString(preludeLua[i+len(preludeLocals):])
	b.WriteString("\n")
	if multiParts != nil {
		return "", multiParts
	}
	// reply and w, at their sizes (see multi.lua).
	b.WriteString("local reply, w = {")
	for k := range replySize(vs) {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString("0")
	}
	b.WriteString("}, {")
	for k := range 4 * len(vs) {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString("false")
	}
	b.WriteString("}\n")
	b.WriteString(multiHead)
	var defined [2 * len(algos)]bool
	for _, v := range vs {
		if v < 0 || v >= len(defined) {
			return "", fmt.Errorf("redisstore: layer variant %d", v)
		}
		if defined[v] {
			continue
		}
		defined[v] = true
		fmt.Fprintf(&b, "\nlocal function layer_%d(kb, ab)\n%s", v, layerLocals)
		if v%2 == 1 {
			b.WriteString(layerLockLocals)
		}
		a := &algos[v/2]
		body := layerBody(*a.lua)
		if a.alg == core.SlidingWindowLog {
			// The log writes with redis.call: deferred (see deferring).
			body = deferringLua + body
		}
		if v%2 == 1 {
			b.WriteString("  local function decide()\n")
			b.WriteString(body)
			b.WriteString("\n  end\n")
			lo := strings.Replace(lockoutLua, lockoutLocals, "", 1)
			if lo == lockoutLua {
				return "", errors.New("redisstore: lockout.lua has changed its locals; update lockoutLocals in multi.go")
			}
			b.WriteString(layerBody(lo))
		} else {
			b.WriteString(body)
		}
		b.WriteString("\nend\n")
	}
	b.WriteString("\n")
	key, arg := 1, 2
	for j, v := range vs {
		fmt.Fprintf(&b, "layer = %d\nr = layer_%d(%d, %d)\n", j+1, v, key-1, arg-1)
		b.WriteString(multiAfter)
		if v%2 == 1 {
			key, arg = key+2, arg+1
		} else {
			key, arg = key+1, arg+1
		}
	}
	b.WriteString(multiTail)
	return b.String(), nil
}

// replySize is the number of integers in the reply of the layers of
// variants vs: 5 per layer, 6 with a lockout.
func replySize(vs []int) int {
	n := 0
	for _, v := range vs {
		n += 5 + v%2
	}
	return n
}

// multiCall is one layered script run (or one undo): its arguments live in
// the call itself, as in call, so that a pooled one costs no allocation
// but its command and reply.
type multiCall struct {
	sha, src string
	keys     [2 * limits.MaxLayers]string
	packed   [limits.MaxLayers][9 * 8]byte // each layer's numbers (packLayer)
	pstr     [limits.MaxLayers]string      // packed, as the argument written
	args     [4 + 2*limits.MaxLayers + limits.MaxLayers]any
	nargs    int
	modeAt   int // the index in args of the mode (see prepare)
	want     int // integers in the reply before any undo record
	locked   [limits.MaxLayers]bool
	capacity [limits.MaxLayers]int64
	algo     [limits.MaxLayers]int
	n        int // layers
}

var multiPool = sync.Pool{New: func() any { return new(multiCall) }}

// put clears c and returns it to the pool.
func (c *multiCall) put() {
	clear(c.keys[:])
	clear(c.pstr[:])
	clear(c.args[:])
	multiPool.Put(c)
}

// The modes of a layered script (multi.lua's ARGV[1]).
const (
	modeTake     = "0" // decide, and write when every layer admits
	modeUndoable = "1" // as modeTake, and reply what an undo needs
	modeCheck    = "2" // decide, and write nothing an admission would
)

// prepare fills c's arguments for reqs, valid, in mode (modeTake,
// modeUndoable or modeCheck).
func (s *Store) prepare(c *multiCall, at time.Time, reqs []core.Request, mode string) error {
	var vs [limits.MaxLayers]int
	c.n = len(reqs)
	nkeys, want := 0, 0
	for j := range reqs {
		p := &reqs[j].Policy
		i := algo(p.Algorithm)
		locked := p.Lockout > 0
		vs[j] = variant(i, locked)
		c.algo[j], c.locked[j], c.capacity[j] = i, locked, limits.Capacity(p.Algorithm, p.Limit, p.Burst)
		c.keys[nkeys] = s.key(reqs[j].Key, *p, i)
		nkeys++
		want += 5
		if locked {
			c.keys[nkeys] = lockKey(c.keys[nkeys-1])
			nkeys++
			want++
		}
	}
	ls, err := scriptFor(vs[:len(reqs)])
	if err != nil {
		return err
	}
	c.sha, c.src, c.want = ls.sha, ls.src, want
	c.args[0], c.args[1], c.args[2] = "evalsha", &c.sha, int64(nkeys) // below 256: boxed without allocating
	n := 3
	for k := range nkeys {
		c.args[n] = &c.keys[k]
		n++
	}
	c.modeAt = n
	c.args[n] = mode
	n++
	for j := range reqs {
		r := &reqs[j]
		p := &r.Policy
		var now, minTTL int64
		explicit := !at.IsZero()
		if explicit {
			now, minTTL = at.UnixMicro(), s.explicitMinTTL.Milliseconds()
		}
		ints := [...]int64{p.Limit, p.Window.Microseconds(), c.capacity[j], r.Cost, now, minTTL, 0, 0, 0}
		na := 6
		if c.locked[j] {
			ints[6], ints[7], ints[8] = p.Lockout.Microseconds(), limits.LockoutCap(p.Lockout, p.LockoutMax).Microseconds(),
				limits.LockoutMemory(p.Lockout, p.LockoutMax, p.LockoutMemory).Microseconds()
			na = 9
		}
		b := packLayer(c.packed[j][:0], ints[:na], explicit)
		c.pstr[j] = unsafe.String(&b[0], len(b))
		c.args[n] = &c.pstr[j]
		n++
	}
	c.nargs = n
	return nil
}

// command returns c's arguments for EVALSHA, or EVAL with the source.
func (c *multiCall) command(eval bool) []any {
	if eval {
		c.args[0], c.args[1] = "eval", &c.src
	} else {
		c.args[0], c.args[1] = "evalsha", &c.sha
	}
	return c.args[:c.nargs]
}

// decisions fills out from the layers' integers r (c.want of them).
func (c *multiCall) decisions(r []int64, out []core.Decision) {
	off := 0
	for j := range c.n {
		out[j] = decision(r[off:], c.capacity[j])
		off += 5
		if c.locked[j] {
			out[j].LockedOut = r[off] == 1
			off++
		}
	}
}

// takeAll runs on the caller's goroutine and honours ctx as the client
// does (a go-redis client built with ContextTimeoutEnabled stops at its
// deadline; any client stops at its own timeouts); TakeAll bounds it.
func (s *Store) takeAll(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision) error {
	if err := checkLayers(reqs, out); err != nil {
		return err
	}
	if len(reqs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: layers: %w", err)
	}
	switch s.client.(type) {
	case *redis.ClusterClient:
		return s.takeGroups(ctx, at, reqs, out, func(key string) int { return int(slot(key)) })
	case *redis.Ring:
		return s.takeGroups(ctx, at, reqs, out, nil)
	}
	return s.takeOne(ctx, at, reqs, out)
}

// checkLayers reports invalid input to TakeAll.
func checkLayers(reqs []core.Request, out []core.Decision) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("%w: redisstore: TakeAll: %d decisions for %d requests", core.ErrInvalidOption, len(out), len(reqs))
	}
	if len(reqs) > limits.MaxLayers {
		return fmt.Errorf("%w: redisstore: TakeAll: %d requests, more than %d", core.ErrInvalidOption, len(reqs), limits.MaxLayers)
	}
	for j := range reqs {
		if err := reqcheck.Validate(&reqs[j]); err != nil {
			return fmt.Errorf("redisstore: TakeAll: request %d: %w", j, err)
		}
		name := policyName(&reqs[j].Policy)
		for k := range j {
			if reqs[k].Key == reqs[j].Key && policyName(&reqs[k].Policy) == name {
				return fmt.Errorf("%w: redisstore: TakeAll: requests %d and %d have key %q and policy %q", core.ErrInvalidOption, k, j, reqs[j].Key, name)
			}
		}
	}
	return nil
}

// policyName is the name p's keys carry.
func policyName(p *core.Policy) string {
	if p.Name != "" {
		return p.Name
	}
	return limits.DefaultName(p.Algorithm, p.Limit, p.Window, p.Burst)
}

// takeOne decides reqs with one script run.
func (s *Store) takeOne(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision) error {
	c := multiPool.Get().(*multiCall)
	defer c.put()
	if err := s.prepare(c, at, reqs, modeTake); err != nil {
		return err
	}
	cmd := redis.NewIntSliceCmd(ctx, c.command(false)...)
	_ = s.client.Process(ctx, cmd)
	if noScript(cmd.Err()) {
		cmd = redis.NewIntSliceCmd(ctx, c.command(true)...)
		_ = s.client.Process(ctx, cmd)
	}
	if err := cmd.Err(); err != nil {
		s.recovery.failed(err)
		return fmt.Errorf("redisstore: layers: %w", err)
	}
	r := cmd.Val()
	if len(r) != c.want {
		return fmt.Errorf("redisstore: layers: script returned %d values, want %d", len(r), c.want)
	}
	c.decisions(r, out)
	return nil
}

// group is the requests of TakeAll in one slot (or on one Ring shard).
type group struct {
	id        int   // the slot
	idx       []int // into reqs
	reqs      []core.Request
	call      *multiCall
	cmd       *redis.Cmd
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
func (s *Store) takeGroups(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision, slotOf func(string) int) error {
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
	if len(gs) == 1 {
		return s.takeOne(ctx, at, reqs, out)
	}
	calls := make([]*multiCall, len(gs))
	for k, g := range gs {
		g.call = multiPool.Get().(*multiCall)
		defer g.call.put()
		if err := s.prepare(g.call, at, g.reqs, modeCheck); err != nil {
			return err
		}
		calls[k] = g.call
	}
	// 1. Check.
	admitted, err := s.runGroups(ctx, gs, calls, out, false)
	if s.afterStep != nil {
		s.afterStep()
	}
	if err != nil || !admitted {
		return err
	}
	// 2. Take.
	for _, g := range gs {
		g.call.args[g.call.modeAt] = modeUndoable
	}
	admitted, err = s.runGroups(ctx, gs, calls, out, true)
	if s.afterStep != nil {
		s.afterStep()
	}
	if err == nil && admitted {
		return nil
	}
	s.giveBack(ctx, gs)
	return err
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
		l := s.logger
		if l == nil {
			l = slog.Default()
		}
		l.LogAttrs(ctx, slog.LevelWarn, "redisstore: a denied layered request could not give back what some layers took; they keep it until it expires",
			slog.String("error", err.Error()))
	}
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
	g.admitted, g.committed, g.undo = false, false, g.undo[:0]
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
	c.decisions(ints, ds)
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

// TakeAll decides reqs, one per layer of a layered core.Limiter, all or
// nothing (see core.Store): it records them all when every one is
// allowed, and none when any is denied, but for the lockout strikes of a
// denied one and the sliding log's trimming of what has left its window,
// which Take makes too. It fails, without a round trip, on invalid input
// (an invalid request, two with one Key and Policy.Name, len(out) not
// len(reqs), more than 16), and, when Redis fails, wraps the
// client's error.
//
// Over a *redis.Client (or any client but a cluster client or a Ring),
// every layer is decided by one script run, in one round trip, as one
// atomic step: TakeAll admits exactly what a single process would.
//
// Over a *redis.ClusterClient, the layers' keys are in the slots of their
// client keys (the hash tag), and one script can only reach one slot. The
// requests are grouped by slot, each group decided as one step by the
// same script, and a request whose groups are in several slots goes in two
// steps (see takeGroups): every group checks without taking,
// and only when every one would admit do they take. A request denied by
// any layer therefore takes nothing from any layer, whatever floods it
// is part of; only a request whose check admitted and that then loses a
// race on one slot (in the moment between the two steps) has the other
// slots undone, at once and exactly, but for the part of a bucket's units
// that drained meanwhile. TakeAll never admits beyond any layer's limit.
// When every request has one client key, as when a Limiter applies the
// same key to every layer, or the keys share a slot, TakeAll is one step
// and one round trip again.
// Over a *redis.Ring, the groups are by client key, each on its shard.
//
// TakeAll is bounded as Take is (see Take and takeAll): over a
// *redis.Client, the layered script runs on one of the Store's flusher
// goroutines, in the pipeline of the decisions that arrive while the
// others are busy; over any other client, as takeAll, with the deadline as
// its context's, on a goroutine of its own unless the client honours
// context deadlines. It fails with the context's error when it stops
// waiting.
func (s *Store) TakeAll(ctx context.Context, now time.Time, reqs []core.Request, out []core.Decision) (time.Time, error) {
	return time.Time{}, s.takeAllUntil(ctx, now, reqs, out, s.deadline(ctx))
}

// takeAllUntil is TakeAll, returning by deadline.
func (s *Store) takeAllUntil(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision, deadline time.Time) error {
	if s.batch == nil {
		return s.takeAllBounded(ctx, at, reqs, out, deadline)
	}
	if err := checkLayers(reqs, out); err != nil {
		return err
	}
	if len(reqs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: layers: %w", err)
	}
	m := multiPool.Get().(*multiCall)
	if err := s.prepare(m, at, reqs, modeTake); err != nil {
		m.put()
		return err
	}
	c := callPool.Get().(*call)
	c.reset(m)
	c.deadline, c.parent = deadline, ctx
	owned, err := s.batch.do(ctx, c)
	if !owned {
		// The flusher may still send m's arguments: neither goes back
		// to its pool.
		return fmt.Errorf("redisstore: layers: %w", err)
	}
	r := c.reply
	if err == nil {
		err = c.err
	}
	c.reply, c.cmd, c.err, c.parent, c.multi = nil, nil, nil, nil, nil
	if !c.burnt {
		callPool.Put(c)
	}
	defer m.put()
	if err != nil {
		s.recovery.failed(err)
		return fmt.Errorf("redisstore: layers: %w", err)
	}
	if len(r) != m.want {
		return fmt.Errorf("redisstore: layers: script returned %d values, want %d", len(r), m.want)
	}
	m.decisions(r, out)
	return nil
}

// takeAllBounded is TakeAll over a client without a batcher: takeAll,
// bounded (see bounded), into copies of its own of reqs and out, which are
// the caller's again once TakeAll has returned.
func (s *Store) takeAllBounded(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision, deadline time.Time) error {
	if len(reqs) > limits.MaxLayers || len(out) != len(reqs) {
		return checkLayers(reqs, out)
	}
	if s.honoursDeadline() {
		return s.bounded(ctx, deadline, func(sctx context.Context) error { return s.takeAll(sctx, at, reqs, out) })
	}
	own := make([]core.Request, len(reqs))
	copy(own, reqs)
	ds := new([limits.MaxLayers]core.Decision)
	err := s.bounded(ctx, deadline, func(sctx context.Context) error { return s.takeAll(sctx, at, own, ds[:len(own)]) })
	if err != nil {
		return fmt.Errorf("redisstore: layers: %w", err)
	}
	copy(out, ds[:len(out)])
	return nil
}
