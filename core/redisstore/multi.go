package redisstore

import (
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
		// unsafe: the packed numbers are the argument written, not a copy
		// of them: 8 against 12 allocs/op for four layers (one a layer),
		// CPU the same within the noise of Redis's own (80 against 83
		// CPU-µs/op, client and server; go test -run '^$' -bench
		// 'MultiLayers/direct/layers-4' ./core/redisstore, median of 6
		// alternating runs, 2026-12-07). setNow, which rewrites these
		// bytes, makes the string anew around them.
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
// (packLayer), rewritten in place. The layer's argument, a string over
// those bytes (see prepare), is dropped while they change and made anew,
// for no string may see its bytes change.
func (c *multiCall) setNow(now, minTTL int64) {
	for j := range c.n {
		n := len(c.pstr[j])
		c.pstr[j] = ""
		binary.LittleEndian.PutUint64(c.packed[j][32:], math.Float64bits(float64(now)))
		binary.LittleEndian.PutUint64(c.packed[j][40:], math.Float64bits(float64(minTTL)))
		c.pstr[j] = unsafe.String(&c.packed[j][0], n)
	}
}
