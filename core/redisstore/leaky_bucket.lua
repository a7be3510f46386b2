-- Leaky bucket as a meter and a shaper: a queue of depth B drained at L per
-- W. Mirrors leakyBucket in core/memstore/algo.go, operation for operation
-- (Lua numbers are float64, as there).
--
-- KEYS[1]  the state, a HASH: v = queue level (%.17g, so that the float64
--          round-trips exactly), t = time of the last admission (µs)
-- ARGV[1]  limit L
-- ARGV[2]  window W, in microseconds
-- ARGV[3]  capacity B
-- ARGV[4]  cost c, in [1, B]
-- ARGV[5]  now, in microseconds since the Unix epoch; "" reads Redis TIME
-- ARGV[6]  minimum TTL in milliseconds (0 unless now is explicit)
-- Returns  {allowed (1 or 0), remaining, reset_ms, retry_ms, delay_ms}
--          as integers; durations rounded up to whole milliseconds.
--          delay_ms is how long an admitted request waits in the queue.
--
-- A request dated before the last admission (a clock stepping back) is
-- decided at the last admission. A denied request writes nothing. An
-- admitted one rewrites the HASH and sets its TTL to the time the queue is
-- empty again (at least 1 ms).
--
-- prelude.lua comes first: it reads ARGV into l, w, b, c, now and
-- minttl and defines ms and firstPass.

local at, level = now, 0
local v, last
local s = redis.call('HMGET', KEYS[1], 'v', 't')
if s[1] then
  v, last = tonumber(s[1]), tonumber(s[2])
  -- The state expires when the queue is empty again: from then on it
  -- decides like no state at all, whatever the key's remaining TTL.
  if now >= last + math.ceil(v * w / l) then
    v = nil
  end
end

-- levelAt is the queue el microseconds after the last admission.
local function levelAt(el)
  return math.max(0, v - el * l / w)
end

if v then
  at = math.max(now, last)
  level = levelAt(at - last)
end

local allowed, retry, delay = 0, 0, 0
if level + c <= b then
  delay = math.ceil(level * w / l)
  level = level + c
  allowed = 1
else
  -- Not fresh: an empty queue has room for c <= B, and the state decides
  -- like none from its expiry on.
  local est = math.ceil((level + c - b) * w / l)
  local el = at - last
  local expires = last + math.ceil(v * w / l)
  retry = firstPass(0, expires - at, est, function(k) return levelAt(el + k) + c <= b end)
end
local remaining = math.floor(b - level)
local reset = math.ceil(level * w / l)
if allowed == 1 then
  redis.call('HSET', KEYS[1], 'v', string.format('%.17g', level), 't', string.format('%d', at))
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.max(ms(at + reset - now), 1, minttl)))
end
return {allowed, remaining, ms(reset), ms(retry), ms(delay)}
