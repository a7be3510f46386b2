-- Layered decisions (Store.TakeAll): the runtime of a script that decides
-- several requests, one per layer, all or nothing. The Store sends the
-- prelude's comments and functions, this, one function per kind of layer
-- (an algorithm's script, and lockout.lua for a policy with a
-- core.Lockout, as the body of "local function layer_<n>(kb, ab)", their
-- KEYS[i] and ARGV[i] rewritten KEYS[kb + i] and ARGV[ab + i], kb and ab
-- being the layer's offsets in this script's KEYS and ARGV), the calls of
-- those functions, one per layer in order, and the end of this, as one
-- script. So that N layers cost about N times an algorithm's own work and
-- one script's fixed cost, a run makes as few tables and closures as it
-- can: none per layer but the algorithm's reply, a lockout's decide, the
-- log's deferring redis, and one per write of the log.
--
-- KEYS     every layer's keys, in order: its state key, then its lockout
--          key when its policy has a lockout
-- ARGV[1]  the mode: '0' decides and, when every layer admits, writes;
--          '2' only checks: it decides every layer and writes nothing
--          the layers' admissions would write (a denial's own effects,
--          the log's trimming and a lockout's strike, are made as in
--          '0'); '1' decides and writes as '0', and the reply then
--          carries what an undo needs. Over a Redis Cluster, where the
--          layers of a request span several slots (one script each), the
--          Store checks every slot first ('2') and takes ('1') only when
--          every slot would admit, undoing only a slot that admitted when
--          another lost a race in between (see takeGroups in multi.go).
-- ARGV[2]  on: one per layer, in order: the layer's ARGV (6 values, 9
--          with a lockout: prelude.lua's, then lockout.lua's) packed as
--          little-endian doubles (struct '<dddddd'), now NaN when the
--          script reads Redis's TIME (layerLocals, packLayer in multi.go)
-- Returns  every layer's reply, 6 integers (7 with a lockout: the sixth
--          the time decided at, in µs, see prelude.lua), in order. With
--          ARGV[1] '1', when every layer admitted: then one undo record
--          per layer (undo_record), and the Redis TIME in ms.
--
-- Every layer is decided, each at its own ARGV's now, the Redis TIME
-- being read once for all: the Store gives every layer the same now (or
-- none). A layer whose key's last admission is later decides at that
-- admission (see prelude.lua); when every layer admitted, but not all at
-- one time, every layer is decided again, its pending writes dropped, no
-- earlier than the latest of their times (at_least), at which every one
-- decides. So all the layers are decided, and recorded, at one time,
-- which each layer's reply carries, and which dates the give-backs of
-- all of them (see give_back.lua). An algorithm's writes (write_state, and the
-- log's ZADD, ZREM, PEXPIRE and DEL) wait in the list of pending writes,
-- and are made only when every layer admitted: a request denied
-- by one layer takes nothing in any. The log's trimming of what has left
-- its window, and a lockout's strikes, are made at once, as the
-- single-layer scripts make them. Peeks (every layer's cost 0: the Store
-- never mixes them with other requests) queue no write, trim nothing and
-- strike nothing, so that a script of peeks writes nothing in any mode
-- and each layer's reply is its own.

local undoable, checking = ARGV[1] == '1', ARGV[1] == '2'

-- at_least is, when the layers are decided again, the time they are
-- decided at, or later (see above); earliest_at and latest_at are the
-- earliest and the latest time a layer was decided at; peeking says the
-- layers are peeks, each decided at its own time, since they record
-- nothing.
local at_least, earliest_at, latest_at, peeking

-- shared_now is the Redis TIME in µs, once a layer's function has read it
-- (for every other to use).
local shared_now

-- The pending writes, in order, 4 slots each in w: the layer that made
-- it, then a SET's key, packed state and TTL in ms, or false and the
-- command (its arguments as a table) of any other write. layer is the
-- layer being decided. w, and reply (the script's reply), are declared
-- before this, made by layeredSource at their sizes (4 slots per layer
-- for w), so that they never grow as the layers fill them.
local writes, layer = 0, 0

-- run is redis.call, for the commands the algorithms' scripts name
-- (version_test.go checks those): the layers' calls and their pending
-- writes. The log's script sees a redis of its own (deferring, in
-- layeredSource) whose writes (ZADD, ZREM, PEXPIRE, DEL) wait in w, as
-- {command, ...}, and whose reads (and trimming) run at once; the other
-- algorithms write only with write_state.
local run = redis.call

-- write_state is the prelude's, deferred.
local function write_state(key, ttl_ms, format, ...)
  local o = 4 * writes
  writes = writes + 1
  w[o + 1], w[o + 2], w[o + 3], w[o + 4] = layer, key, struct.pack(format, ...), string.format('%d', ttl_ms)
end

local replied, admitted, r = 0, true, nil

-- The calls of the layers' functions go here, in the function
-- decide_layers,
-- each followed by:
-- after each layer
if r[1] ~= 1 then admitted = false end
for i = 1, #r do reply[replied + i] = r[i] end
replied = replied + #r
earliest_at, latest_at = math.min(earliest_at or r[6], r[6]), math.max(latest_at or r[6], r[6])
-- end after each layer

-- Every layer at one time: decided again, at the latest, when they were
-- not (their pending writes dropped).
if admitted and not peeking and earliest_at ~= latest_at then
  writes, replied, at_least, earliest_at, latest_at = 0, 0, latest_at, nil, nil
  decide_layers()
end

-- The pending writes are made when every layer admitted.
if not admitted or checking then return reply end
if undoable then
  -- undo_record returns, before layer j's writes are made, what undoing
  -- them needs: {'s', state written, state before ('' for none), its
  -- PTTL, TTL written, 0} for a state in a string; {'l', the score of
  -- the member added, that member, '', TTL written, the log's PTTL} for
  -- the log (the undo finds the member by its score, which no other
  -- member has, whatever the members have been renamed to since);
  -- {'x'} when there is nothing to undo, or no safe way to: a state in
  -- the HASH of the layout before, a log rebased.
  local function undo_record(j)
    local added, score, ttl, log_ttl = '', '', '', 0
    for i = 0, writes - 1 do
      local o = 4 * i
      if w[o + 1] == j then
        local c = w[o + 3]
        if w[o + 2] then
          local old = redis.pcall('GET', w[o + 2])
          if type(old) == 'table' then return {'x'} end
          return {'s', c, old or '', redis.call('PTTL', w[o + 2]), w[o + 4], 0}
        elseif c[1] == 'ZADD' then
          added, score, log_ttl = c[4], c[3], redis.call('PTTL', c[2])
        elseif c[1] == 'PEXPIRE' then
          ttl = c[3]
        elseif c[1] == 'DEL' then
          return {'x'}
        end
      end
    end
    if added == '' then return {'x'} end
    return {'l', score, added, '', ttl, log_ttl}
  end
  for j = 1, layer do reply[#reply + 1] = undo_record(j) end
  local time = redis.call('TIME')
  reply[#reply + 1] = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
for i = 0, writes - 1 do
  local o = 4 * i
  if w[o + 2] then
    run('SET', w[o + 2], w[o + 3], 'PX', w[o + 4])
  else
    run(unpack(w[o + 3]))
  end
end
return reply
