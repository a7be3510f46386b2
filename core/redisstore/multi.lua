-- Layered decisions (Store.TakeAll): the runtime of a script that decides
-- several requests, one per layer, all or nothing. The Store sends the
-- prelude's comments and functions, this, one function per kind of layer
-- (an algorithm's script, and lockout.lua for a policy with a
-- core.Lockout, as the body of "local function layer_<n>(KEYS, ARGV)",
-- whose own KEYS and ARGV are those prelude.lua and lockout.lua describe),
-- and the calls of those functions, one per layer in order, as one script.
--
-- KEYS     every layer's keys, in order: its state key, then its lockout
--          key when its policy has a lockout
-- ARGV[1]  '1' when the caller may have to undo the writes (the layers of
--          a request span several Redis Cluster slots, one script each):
--          the reply then carries what the undo needs; else '0'
-- ARGV[2]  on: every layer's ARGV, 6 values (9 with a lockout), in order
-- Returns  every layer's reply, 5 integers (6 with a lockout), in order.
--          With ARGV[1] '1', when every layer admitted: then one undo
--          record per layer (undo_record), and the Redis TIME in ms.
--
-- Every layer is decided, each at its own ARGV's now, the Redis TIME
-- being read once for all. An algorithm's writes (write_state, and the
-- log's ZADD, ZREM, PEXPIRE and DEL) wait in the layer's list of pending
-- writes, and are made only when every layer admitted: a request denied
-- by one layer takes nothing in any. The log's trimming of what has left
-- its window, and a lockout's strikes, are made at once, as the
-- single-layer scripts make them.

local undoable = ARGV[1] == '1'

-- redis_now is the Redis TIME in µs, read once.
local shared_now
local function redis_now()
  if not shared_now then
    local time = redis.call('TIME')
    shared_now = tonumber(time[1]) * 1000000 + tonumber(time[2])
  end
  return shared_now
end

-- pending holds the writes of the layer being decided: each a command's
-- arguments.
local pending
local deferred_writes = {SET = true, ZADD = true, ZREM = true, PEXPIRE = true, DEL = true}

-- run is redis.call, for the commands the algorithms' scripts name
-- (version_test.go checks those): the layers' calls and their pending
-- writes.
local run = redis.call

-- deferring is the redis an algorithm's script sees: its writes wait in
-- pending, its reads (and the log's trimming) run at once.
local deferring = {
  call = function(command, ...)
    if deferred_writes[command] then
      pending[#pending + 1] = {command, ...}
      return 0
    end
    return run(command, ...)
  end,
  pcall = redis.pcall,
}

-- write_state is the prelude's, deferred.
local function write_state(key, ttl_ms, format, ...)
  pending[#pending + 1] = {'SET', key, struct.pack(format, ...), 'PX', string.format('%d', ttl_ms)}
end

-- undo_record returns, before a layer's writes are made, what undoing
-- them needs: {'s', state written, state before ('' for none), its PTTL,
-- TTL written, 0} for a state in a string; {'l', member added, member it
-- replaced ('' for none), that member's score, TTL written, the log's
-- PTTL} for the log; {'x'} when there is nothing to undo, or no safe way
-- to: a state in the HASH of the layout before, a log rebased.
local function undo_record(list)
  local added, removed, score, ttl, log_ttl = '', '', '', '', 0
  for i = 1, #list do
    local c = list[i]
    if c[1] == 'SET' then
      local old = redis.pcall('GET', c[2])
      if type(old) == 'table' then return {'x'} end
      return {'s', c[3], old or '', redis.call('PTTL', c[2]), c[5], 0}
    elseif c[1] == 'ZREM' then
      removed, score = c[3], redis.call('ZSCORE', c[2], c[3]) or ''
    elseif c[1] == 'ZADD' then
      added, log_ttl = c[4], redis.call('PTTL', c[2])
    elseif c[1] == 'PEXPIRE' then
      ttl = c[3]
    elseif c[1] == 'DEL' then
      return {'x'}
    end
  end
  if added == '' then return {'x'} end
  return {'l', added, removed, score, ttl, log_ttl}
end

local reply, admitted, lists = {}, true, {}

-- decide_layer decides one layer with its function and keys and ARGV.
local function decide_layer(layer, keys, argv)
  pending = {}
  lists[#lists + 1] = pending
  local r = layer(keys, argv)
  for i = 1, #r do reply[#reply + 1] = r[i] end
  if r[1] ~= 1 then admitted = false end
end

-- finish makes the pending writes when every layer admitted, and returns
-- the reply.
local function finish()
  if not admitted then return reply end
  if undoable then
    for i = 1, #lists do reply[#reply + 1] = undo_record(lists[i]) end
    local time = redis.call('TIME')
    reply[#reply + 1] = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  for i = 1, #lists do
    local list = lists[i]
    for j = 1, #list do run(unpack(list[j])) end
  end
  return reply
end
