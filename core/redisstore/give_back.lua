-- Give-backs (core.Request.Cost below 0): the script that returns units
-- that admissions took, to the states of one or more keys, each on its own
-- (a give-back is never denied, so nothing is all or nothing). Take runs it
-- for one key; TakeAll of give-backs for all its keys on one Redis, or for
-- those of one slot on a Redis Cluster. Mirrors giveBack in
-- core/memstore/algo.go, operation for operation (Lua numbers are
-- float64, as there). A script of its own, not a branch of the
-- algorithms' scripts: a take's script stays as it was, and a give-back
-- needs neither the prelude nor a lockout's wrapper.
--
-- KEYS[i]  the state key of the i-th give-back (never its lockout: a
--          give-back strikes no lockout and lifts none)
-- ARGV[i]  its numbers, packed as little-endian doubles ('<ddddd'): the
--          algorithm (its index in algos in store.go: 0 fixed window, 1
--          sliding window log, 2 sliding window counter, 3 token bucket,
--          4 leaky bucket), limit, window (µs), the units to give back
--          (> 0, at most the capacity), and now: the time, in µs, that
--          Take or TakeAll returned for the admission (never Redis TIME)
-- Returns  {now}, the last give-back's (a TakeAll's are all one)
--
-- A give-back writes only a state that still counts units of the
-- admission, and only with commands that keep the key's TTL as it is
-- (SETRANGE over the packed numbers, ZADD and ZREM of members): it creates
-- no key, and moves no expiry. A missing key, a state of another window,
-- a log without a member at now, and a state in the HASH layout before
-- (which GET refuses, and which an admission since the upgrade has
-- replaced) change nothing. Giving back a log's last units removes the
-- key, as ZREM of a ZSET's last member does.
--
-- Over a Redis Cluster, a layered request's slot may have recorded its
-- units at a later time than now, the one the request returned, which
-- alias.lua then noted in the HASH "<state key>:at:<now>" (a field per
-- time, its units). The give-back takes its units from there first, and
-- the rest at now. Admissions dated alike share the HASH and the member
-- at now, whose units are alike: however their give-backs share them out,
-- none takes more than the admissions dated now put there, and each
-- gives back no more than its own took, so every unit given back was
-- taken, and none is missed.

-- span returns the running counts of a log's member (see
-- sliding_window_log.lua).
local function span(member)
  local from, to = string.match(member, '^(%d+):(%d+)$')
  return tonumber(from), tonumber(to)
end

-- put writes x, a count, over the 8 bytes at offset of key's packed state.
local function put(key, offset, x)
  redis.call('SETRANGE', key, offset, struct.pack('<d', x))
end

-- give gives back units of the admissions recorded at at (µs) from key's
-- state, of algorithm, limit and window.
local function give(key, algorithm, limit, window, units, at)
  if algorithm == 1 then
    -- The log: the member scored at gives back up to units of its last
    -- units (units admitted in one microsecond are alike), and every
    -- member after it is renumbered that much lower, so that the log
    -- holds that many units fewer wherever the window starts (as undo.lua
    -- does). A member that has left the window and was not trimmed yet
    -- counts for nothing either way. Each new name is added before the
    -- old one is removed, so that the ZSET, and its TTL, lives on while
    -- it has members (a ZSET without members is deleted, and a ZADD would
    -- make it anew without a TTL); in time order, the new names meet no
    -- name still in the log (the members hold disjoint runs of units).
    local score = string.format('%d', at)
    local found = redis.call('ZRANGEBYSCORE', key, score, score)[1]
    if found then
      local from, to = span(found)
      units = math.min(units, to - from)
      local later = redis.call('ZRANGEBYSCORE', key, '(' .. score, '+inf', 'WITHSCORES')
      if to - units > from then
        redis.call('ZADD', key, score, string.format('%d:%d', from, to - units))
      end
      redis.call('ZREM', key, found)
      for k = 1, #later, 2 do
        local f, t = span(later[k])
        redis.call('ZADD', key, later[k + 1], string.format('%d:%d', f - units, t - units))
        redis.call('ZREM', key, later[k])
      end
    end
    return
  end
  local packed = redis.pcall('GET', key)
  if type(packed) ~= 'string' then return end
  -- math.fmod truncates like Go's %, and is exact.
  local window_start = at - math.fmod(at, window)
  if algorithm == 0 then
    -- '<ddd': the window's start, its count, the last admission.
    local start, count = struct.unpack('<dd', packed)
    if start == window_start and count > 0 then
      put(key, 8, math.max(0, count - units))
    end
  elseif algorithm == 2 then
    -- '<dddd': the current window's start, its count, the previous
    -- window's count, the last admission. The admission's window is the
    -- current one, or the previous one once the state has moved on to
    -- the next.
    local start, current, previous = struct.unpack('<ddd', packed)
    if start == window_start and current > 0 then
      put(key, 8, math.max(0, current - units))
    elseif start == window_start + window and previous > 0 then
      put(key, 16, math.max(0, previous - units))
    end
  else
    -- A bucket, '<dd': the level (the units used) as of the last
    -- admission, and its time. What has drained between the admission
    -- and the last admission is not given back: of the admission's
    -- units, only units less that drain can still be in the level (all
    -- of them when nothing was admitted since).
    local level, last = struct.unpack('<dd', packed)
    local drained = math.max(0, last - at) * limit / window
    units = math.min(units, math.max(0, units - drained))
    if units > 0 and level > 0 then
      put(key, 0, math.max(0, level - units))
    end
  end
end

local now
for i = 1, #KEYS do
  local key = KEYS[i]
  local algorithm, limit, window, units
  algorithm, limit, window, units, now = struct.unpack('<ddddd', ARGV[i])
  -- The units that alias.lua recorded elsewhere first, then those at now.
  local alias = key .. ':at:' .. string.format('%d', now)
  local elsewhere = redis.call('HGETALL', alias)
  for k = 1, #elsewhere, 2 do
    if units <= 0 then break end
    local there = math.min(units, tonumber(elsewhere[k + 1]))
    give(key, algorithm, limit, window, there, tonumber(elsewhere[k]))
    units = units - there
    if redis.call('HINCRBY', alias, elsewhere[k], -there) <= 0 then
      redis.call('HDEL', alias, elsewhere[k])
    end
  end
  if units > 0 then
    give(key, algorithm, limit, window, units, now)
  end
end
return {now}
