package redisstore

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/apigate/ratelimit/core"
	"github.com/apigate/ratelimit/internal/rules/limits"
	"github.com/apigate/ratelimit/internal/rules/reqcheck"
)

//go:embed multi.lua
var multiLua string

// layerLocals are the prelude's per-request locals, as every layer's
// function declares them from its own ARGV (at offset ab), but for the
// Redis TIME, read once for all layers (shared_now in multi.lua).
const layerLocals = `  local limit, window, capacity, cost, now, min_ttl = struct.unpack('<dddddd', ARGV[ab + 1])
  local ask = math.max(cost, 1)
  if now ~= now then
    if not shared_now then
      local time = redis.call('TIME')
      shared_now = tonumber(time[1]) * 1000000 + tonumber(time[2])
    end
    now = shared_now
  end
  local earliest = at_least or now
  peeking = cost == 0
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
local ask = math.max(cost, 1)
local now = tonumber(ARGV[5])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local min_ttl = tonumber(ARGV[6])
local earliest = now
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
	b.WriteString("\nlocal function decide_layers()\n")
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
	b.WriteString("end\ndecide_layers()\n")
	b.WriteString(multiTail)
	return b.String(), nil
}

// replySize is the number of integers in the reply of the layers of
// variants vs: 6 per layer (the sixth the time decided at), 7 with a
// lockout.
func replySize(vs []int) int {
	n := 0
	for _, v := range vs {
		n += 6 + v%2
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
		want += 6
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

// decisions fills out from the layers' integers r (c.want of them), and
// returns the time the first layer was decided at (µs), which is every
// layer's: one now for all (see multi.lua).
func (c *multiCall) decisions(r []int64, out []core.Decision) int64 {
	off := 0
	for j := range c.n {
		out[j] = decision(r[off:], c.capacity[j])
		off += 6
		if c.locked[j] {
			out[j].LockedOut = r[off] == 1
			off++
		}
	}
	return r[5]
}

// setNow makes every layer of c, prepared at Redis TIME, decide at now
// (µs) instead, its keys living minTTL (ms) or more (see takeGroups): the
// packed now and min_ttl, the fifth and sixth numbers of each layer's ARGV
// (packLayer), rewritten in place.
func (c *multiCall) setNow(now, minTTL int64) {
	for j := range c.n {
		binary.LittleEndian.PutUint64(c.packed[j][32:], math.Float64bits(float64(now)))
		binary.LittleEndian.PutUint64(c.packed[j][40:], math.Float64bits(float64(minTTL)))
	}
}

// takeAll runs on the caller's goroutine and honours ctx as the client
// does (a go-redis client built with ContextTimeoutEnabled stops at its
// deadline; any client stops at its own timeouts); TakeAll bounds it. It
// returns the time decided at, in µs (0 when reqs is empty).
func (s *Store) takeAll(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision) (int64, error) {
	if err := checkLayers(reqs, out); err != nil {
		return 0, err
	}
	if len(reqs) == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("redisstore: layers: %w", err)
	}
	var slotOf func(string) int
	switch s.client.(type) {
	case *redis.ClusterClient:
		slotOf = func(key string) int { return int(slot(key)) }
	case *redis.Ring:
	default:
		if reqs[0].Cost < 0 {
			return s.giveBackAll(ctx, at, reqs, out, time.Time{})
		}
		return s.takeOne(ctx, at, reqs, out)
	}
	if reqs[0].Cost < 0 {
		return s.giveBackGroups(ctx, at, reqs, out, slotOf)
	}
	return s.takeGroups(ctx, at, reqs, out, slotOf)
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
		if (reqs[j].Cost == 0) != (reqs[0].Cost == 0) {
			return fmt.Errorf("%w: redisstore: TakeAll: requests 0 and %d: a peek (cost 0) with a request that is not; all or none must be peeks",
				core.ErrInvalidOption, j)
		}
		if (reqs[j].Cost < 0) != (reqs[0].Cost < 0) {
			return fmt.Errorf("%w: redisstore: TakeAll: requests 0 and %d: a give-back (cost below 0) with a request that is not; all or none must be give-backs",
				core.ErrInvalidOption, j)
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

// takeOne decides reqs with one script run, and returns the time decided
// at (µs).
func (s *Store) takeOne(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision) (int64, error) {
	c := multiPool.Get().(*multiCall)
	defer c.put()
	if err := s.prepare(c, at, reqs, modeTake); err != nil {
		return 0, err
	}
	r, err := s.process(ctx, c)
	if err != nil {
		s.recovery.failed(err)
		return 0, fmt.Errorf("redisstore: layers: %w", err)
	}
	if len(r) != c.want {
		return 0, fmt.Errorf("redisstore: layers: script returned %d values, want %d", len(r), c.want)
	}
	return c.decisions(r, out), nil
}

// process runs c's script with ctx on the Store's client, EVAL after a
// NOSCRIPT, and returns its reply.
func (s *Store) process(ctx context.Context, c *multiCall) ([]int64, error) {
	cmd := redis.NewIntSliceCmd(ctx, c.command(false)...)
	_ = s.client.Process(ctx, cmd)
	if noScript(cmd.Err()) {
		cmd = redis.NewIntSliceCmd(ctx, c.command(true)...)
		_ = s.client.Process(ctx, cmd)
	}
	return cmd.Val(), cmd.Err()
}

// TakeAll decides reqs, one per layer of a layered core.Limiter, all or
// nothing (see core.Store): it records them all when every one is
// allowed, and none when any is denied, but for the lockout strikes of a
// denied one and the sliding log's trimming of what has left its window,
// which Take makes too. It fails, without a round trip, on invalid input
// (an invalid request, two with one Key and Policy.Name, len(out) not
// len(reqs), more than 16, peeks or give-backs mixed with other requests,
// give-backs at a zero now), and, when Redis fails, wraps the client's
// error.
//
// Peeks (every request of cost 0, see core.Request.Cost) are decided each
// on its own and write nothing; over a *redis.Client in one script run,
// over a cluster client in one script run per slot, all sent at once: a
// single round trip, since nothing written needs checking or undoing.
// Give-backs (every request of a cost below 0, dated with the time a
// TakeAll or Take returned for their admissions) are applied each on its
// own, since none can be denied: one run of give_back.lua over every key
// over a *redis.Client, one per slot over a cluster client, all sent at
// once, with no check and no undo.
//
// TakeAll returns the time it decided at, every request's (see Take):
// over a *redis.Client, the one Redis TIME its script read, or now; over
// a cluster client, the time every slot took at (see takeGroups).
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
	at, err := s.takeAllUntil(ctx, now, reqs, out, s.deadline(ctx))
	if err != nil || at == 0 {
		return time.Time{}, err
	}
	return time.UnixMicro(at), nil
}

// takeAllUntil is TakeAll, returning by deadline, with the time decided at
// in µs (0 when reqs is empty).
func (s *Store) takeAllUntil(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision, deadline time.Time) (int64, error) {
	if s.batch == nil {
		return s.takeAllBounded(ctx, at, reqs, out, deadline)
	}
	if err := checkLayers(reqs, out); err != nil {
		return 0, err
	}
	if len(reqs) == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("redisstore: layers: %w", err)
	}
	if reqs[0].Cost < 0 {
		return s.giveBackAll(ctx, at, reqs, out, deadline)
	}
	m := multiPool.Get().(*multiCall)
	if err := s.prepare(m, at, reqs, modeTake); err != nil {
		m.put()
		return 0, err
	}
	r, owned, err := s.batched(ctx, m, deadline)
	if !owned {
		// The flusher may still send m's arguments: m does not go back
		// to its pool.
		return 0, fmt.Errorf("redisstore: layers: %w", err)
	}
	defer m.put()
	if err != nil {
		s.recovery.failed(err)
		return 0, fmt.Errorf("redisstore: layers: %w", err)
	}
	if len(r) != m.want {
		return 0, fmt.Errorf("redisstore: layers: script returned %d values, want %d", len(r), m.want)
	}
	return m.decisions(r, out), nil
}

// batched runs m's script through the batcher, by deadline, and returns
// its reply. It returns owned false, with the error of the wait, when it
// stopped waiting after the call was queued: m then belongs to the
// flusher, which may still send its arguments, and must not go back to
// its pool.
func (s *Store) batched(ctx context.Context, m *multiCall, deadline time.Time) (_ []int64, owned bool, _ error) {
	c := callPool.Get().(*call)
	c.reset(m)
	c.deadline, c.parent = deadline, ctx
	owned, err := s.batch.do(ctx, c)
	if !owned {
		return nil, false, err
	}
	r := c.reply
	if err == nil {
		err = c.err
	}
	c.reply, c.cmd, c.err, c.parent, c.multi = nil, nil, nil, nil, nil
	if !c.burnt {
		callPool.Put(c)
	}
	return r, true, err
}

// takeAllBounded is TakeAll over a client without a batcher: takeAll,
// bounded (see bounded), into copies of its own of reqs and out, which are
// the caller's again once TakeAll has returned.
func (s *Store) takeAllBounded(ctx context.Context, at time.Time, reqs []core.Request, out []core.Decision, deadline time.Time) (int64, error) {
	if len(reqs) > limits.MaxLayers || len(out) != len(reqs) {
		return 0, checkLayers(reqs, out)
	}
	// The call may go on after bounded stops waiting for it: it writes
	// the time where only it writes, read only once it has answered.
	now := new(int64)
	if s.honoursDeadline() {
		err := s.bounded(ctx, deadline, func(sctx context.Context) (err error) {
			*now, err = s.takeAll(sctx, at, reqs, out)
			return err
		})
		if err != nil {
			return 0, err
		}
		return *now, nil
	}
	own := make([]core.Request, len(reqs))
	copy(own, reqs)
	ds := new([limits.MaxLayers]core.Decision)
	err := s.bounded(ctx, deadline, func(sctx context.Context) (err error) {
		*now, err = s.takeAll(sctx, at, own, ds[:len(own)])
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("redisstore: layers: %w", err)
	}
	copy(out, ds[:len(out)])
	return *now, nil
}
