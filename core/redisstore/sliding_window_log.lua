-- Sliding window log: one ZSET member per admitted cost unit, scored by its
-- time, over (now-W, now]. Mirrors slidingLog in core/memstore/algo.go.
--
-- KEYS[1]  the log, a ZSET: score = admission time (µs), member
--          "<now>:<seq>", unique even within one microsecond
-- KEYS[2]  the sequence, a STRING counter (INCRBY) that numbers members
-- ARGV[1]  limit L
-- ARGV[2]  window W, in microseconds
-- ARGV[3]  capacity (unused; every script takes the same ARGV)
-- ARGV[4]  cost c, in [1, L]
-- ARGV[5]  now, in microseconds since the Unix epoch; "" reads Redis TIME
-- ARGV[6]  minimum TTL in milliseconds (0 unless now is explicit)
-- Returns  {allowed (1 or 0), remaining, reset_ms, retry_ms, delay_ms (0)}
--          as integers; durations rounded up to whole milliseconds.
--
-- A request dated before the last admission (a clock stepping back) is
-- decided at the last admission, so the log stays in time order. Every
-- request first trims the members at or before now-W, which have left the
-- window; a denied request changes nothing else. An admitted one adds c
-- members and sets the TTL of both keys to W, when the newest member
-- leaves the window.
--
-- prelude.lua comes first: it reads ARGV into l, w, b, c, now and
-- minttl and defines ms and firstPass.

-- The newest member is the last admission.
local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local at = now
if newest[2] then
  newest = tonumber(newest[2])
  at = math.max(now, newest)
end
-- Lua's tostring keeps 14 digits: format every microsecond time with %d.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', at - w))
local n = redis.call('ZCARD', KEYS[1])

local allowed, reset, retry = 0, 0, 0
if n + c <= l then
  local last = redis.call('INCRBY', KEYS[2], c)
  local score = string.format('%d', at)
  local batch = {}
  for seq = last - c + 1, last do
    batch[#batch + 1] = score
    batch[#batch + 1] = score .. ':' .. string.format('%d', seq)
    if #batch >= 1000 then -- stay far below Lua's stack limit
      redis.call('ZADD', KEYS[1], unpack(batch))
      batch = {}
    end
  end
  if #batch > 0 then
    redis.call('ZADD', KEYS[1], unpack(batch))
  end
  local ttl = string.format('%d', math.max(ms(at + w - now), minttl))
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  n = n + c
  allowed = 1
  reset = w -- the newest unit is at's
else
  -- The (n+c-L)-th oldest unit must leave the window first.
  local k = string.format('%d', n + c - l - 1)
  local e = redis.call('ZRANGE', KEYS[1], k, k, 'WITHSCORES')
  retry = tonumber(e[2]) + w - at
  -- n > 0 here, since c <= L: the newest member is in the window.
  reset = newest + w - at
end
return {allowed, l - n, ms(reset), ms(retry), 0}
