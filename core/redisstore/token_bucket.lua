-- Token bucket: up to B tokens, refilled continuously at L per W. Mirrors
-- tokenBucket in core/memstore/algo.go, operation for operation (Lua
-- numbers are float64, as there).
--
-- KEYS[1]  the state, a HASH: v = tokens left (%.17g, so that the float64
--          round-trips exactly), t = time of the last admission (µs)
-- ARGV[1]  limit L
-- ARGV[2]  window W, in microseconds
-- ARGV[3]  capacity B
-- ARGV[4]  cost c, in [1, B]
-- ARGV[5]  now, in microseconds since the Unix epoch; "" reads Redis TIME
-- ARGV[6]  minimum TTL in milliseconds (0 unless now is explicit)
-- Returns  {allowed (1 or 0), remaining, reset_ms, retry_ms, delay_ms (0)}
--          as integers; durations rounded up to whole milliseconds.
--
-- A request dated before the last admission (a clock stepping back) is
-- decided at the last admission. A denied request writes nothing. An
-- admitted one rewrites the HASH and sets its TTL to the time the bucket
-- is full again (at least 1 ms).
--
-- prelude.lua comes first: it reads ARGV into l, w, b, c, now and
-- minttl and defines ms and firstPass.

local at, tokens = now, b
local v, last
local s = redis.call('HMGET', KEYS[1], 'v', 't')
if s[1] then
  v, last = tonumber(s[1]), tonumber(s[2])
  -- The state expires when the bucket is full again: from then on it
  -- decides like no state at all, whatever the key's remaining TTL.
  if now >= last + math.ceil((b - v) * w / l) then
    v = nil
  end
end

-- tokensAt is the bucket el microseconds after the last admission.
local function tokensAt(el)
  return math.min(b, v + el * l / w)
end

if v then
  at = math.max(now, last)
  tokens = tokensAt(at - last)
end

local allowed, retry = 0, 0
if tokens >= c then
  tokens = tokens - c
  allowed = 1
else
  -- Not fresh: a fresh bucket holds B >= c tokens. So does the state
  -- from its expiry on, when it decides like none.
  local est = math.ceil((c - tokens) * w / l)
  local el = at - last
  local expires = last + math.ceil((b - v) * w / l)
  retry = firstPass(0, expires - at, est, function(k) return tokensAt(el + k) >= c end)
end
local remaining = math.floor(tokens)
local reset = math.ceil((b - tokens) * w / l)
if allowed == 1 then
  redis.call('HSET', KEYS[1], 'v', string.format('%.17g', tokens), 't', string.format('%d', at))
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.max(ms(at + reset - now), 1, minttl)))
end
return {allowed, remaining, ms(reset), ms(retry), 0}
