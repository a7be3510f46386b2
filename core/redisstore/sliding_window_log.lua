-- Sliding window log: one ZSET member per admitted request (per
-- microsecond, when several are admitted in the same one), scored by its
-- time, over (now - window, now]. Members number their units in a running
-- count, so that, whatever its cost, a request costs a few O(log n)
-- commands for n members (O(log n) of them for a denial at worst) and
-- writes one member. Mirrors slidingLog, peekLog and unitLog in
-- core/memstore. It ignores capacity: cost is in [0, limit], 0 for a peek.
--
-- KEYS[1] is a ZSET: score = admission time (µs); member "<from>:<to>",
-- the running count before its first unit and after its last (it holds
-- to - from units). delay_ms is 0.
--
-- The units in the window are the newest member's to minus the oldest
-- member's from. Members are in time order, with distinct scores, so
-- their running counts increase with their rank.
--
-- Deciding a request dated before the last admission at that admission
-- (see prelude.lua) keeps the log in time order. Every request first trims
-- the members at or before now - window, which have left the window; a
-- denied request changes nothing else. A peek trims nothing: it counts
-- from the oldest member still in the window, by its rank. An admitted
-- request adds a member (or widens the newest, admitted in the same
-- microsecond) and sets the TTL to the window, when that member leaves
-- it. The count starts again at 0 whenever the window is empty, and is
-- rebased on the oldest member, rewriting every member, in the rare case
-- it would pass 2^52 (float64 numbers are exact to 2^53); that costs
-- O(n), once every 2^52 - 2 * limit units.

local log = KEYS[1]

-- span returns the running counts of a member: before its first unit and
-- after its last.
local function span(member)
  local from, to = string.match(member, '^(%d+):(%d+)$')
  return tonumber(from), tonumber(to)
end

-- The newest member is the last admission.
local newest = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
local at, last = earliest, nil
if newest[2] then
  last = tonumber(newest[2])
  at = math.max(earliest, last)
end
-- first is the rank of the oldest member in the window: 0 once the
-- members that have left it are trimmed, as a request does; a peek, which
-- writes nothing, counts them instead.
-- Lua's tostring keeps 14 digits: format every microsecond time with %d.
local first = 0
if cost > 0 then
  redis.call('ZREMRANGEBYSCORE', log, '-inf', string.format('%d', at - window))
elseif last then
  first = redis.call('ZCOUNT', log, '-inf', string.format('%d', at - window))
end
-- base and total are the running counts before the oldest unit in the
-- window and after the newest: the newest member outlives every trim
-- that leaves any member.
local base, total = 0, 0
local oldest = redis.call('ZRANGE', log, first, first)
if oldest[1] then
  base = span(oldest[1])
  local _, to = span(newest[1])
  total = to
end
local count = total - base

local allowed, reset, retry = 0, 0, 0
if cost == 0 and count + ask <= limit then
  -- A peek that would pass: the units in the window, as they stand.
  allowed = 1
  if count > 0 then
    reset = last + window - at
  end
elseif cost > 0 and count + cost <= limit then
  if total + cost > 4503599627370496 then -- 2^52: rebase on the oldest
    local members = redis.call('ZRANGE', log, 0, -1, 'WITHSCORES')
    redis.call('DEL', log)
    local batch = {}
    for i = 1, #members, 2 do
      local from, to = span(members[i])
      local member = string.format('%d:%d', from - base, to - base)
      batch[#batch + 1] = members[i + 1]
      batch[#batch + 1] = member
      if #batch >= 1000 or i + 1 == #members then -- far below Lua's stack limit
        redis.call('ZADD', log, unpack(batch))
        batch = {}
      end
      newest[1] = member
    end
    base, total = 0, total - base
  end
  local from = total
  if last == at then
    -- Admitted in the same microsecond as the newest member, which is
    -- in the window: widen it, as core/memstore does.
    from = span(newest[1])
    redis.call('ZREM', log, newest[1])
  end
  redis.call('ZADD', log, string.format('%d', at), string.format('%d:%d', from, total + cost))
  redis.call('PEXPIRE', log, string.format('%d', math.max(ms_up(at + window - now), min_ttl)))
  count = count + cost
  allowed = 1
  reset = window -- the newest unit is at's
else
  -- The k-th oldest unit, unit base + k, must leave the window first. It
  -- is in the first member whose running count after it reaches base + k,
  -- below rank first + k since each member holds a unit or more. Ranks are
  -- searched by interpolation (one probe when the members hold even
  -- costs) alternating with bisection (O(log n) probes at worst); the
  -- last few members are read at once. count > 0 here, since ask <= limit.
  local k = count + ask - limit
  local unit = base + k
  local size = redis.call('ZCARD', log)
  -- The member is in ranks [lo, hi]. below is the running count before
  -- rank lo; above the count after rank top, at or past hi.
  local lo, hi = first, first + math.min(k, size - first) - 1
  local below, top, above = base, size - 1, total
  local interpolate = true
  while hi - lo > 8 do
    local mid = math.floor((lo + hi) / 2)
    if interpolate then
      mid = lo + math.ceil((unit - below) * (top - lo + 1) / (above - below)) - 1
      mid = math.max(lo, math.min(mid, hi - 1))
    end
    interpolate = not interpolate
    local _, to = span(redis.call('ZRANGE', log, mid, mid)[1])
    if to >= unit then
      hi, top, above = mid, mid, to
    else
      lo, below = mid + 1, to
    end
  end
  local members = redis.call('ZRANGE', log, lo, hi, 'WITHSCORES')
  for i = 1, #members, 2 do
    local _, to = span(members[i])
    if to >= unit then
      retry = tonumber(members[i + 1]) + window - at
      break
    end
  end
  reset = last + window - at
end
-- count exceeds limit when the client was moved to a smaller plan.
return {allowed, math.max(0, limit - count), ms_up(reset), ms_up(retry), 0, at}
