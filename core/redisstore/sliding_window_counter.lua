-- Sliding window counter: this and the previous epoch-aligned window's
-- counts, the previous one weighed by the part of it still inside the
-- sliding window. Mirrors slidingCounter in core/memstore/algo.go, operation
-- for operation (Lua numbers are float64, as there).
--
-- KEYS[1]  the state, a HASH: w = current window start (µs), c = its count,
--          p = the count of the window before it, t = time of the last
--          admission (µs)
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
-- decided at the last admission. A denied request writes nothing. An
-- admitted one rewrites the HASH and sets its TTL to the end of the next
-- window, when this window's count stops weighing.
--
-- prelude.lua comes first: it reads ARGV into l, w, b, c, now and
-- minttl and defines ms and firstPass.

-- weigh is a window's count weighed by the part of it still inside the
-- sliding window, el microseconds into the next one: the count itself at
-- el = 0 (count * w / w may round away from it), so that the weight never
-- grows with time, nor across a window's end.
local function weigh(count, el)
  if el == 0 then return count end
  return count * (w - el) / w
end

-- fits is the admission test.
local function fits(p, cur)
  return p + cur + c <= l
end

local s = redis.call('HMGET', KEYS[1], 'w', 'c', 'p', 't')
local at = now
if s[1] then
  at = math.max(now, tonumber(s[4]) or now)
end
-- math.fmod truncates like Go's %, and is exact.
local ws = at - math.fmod(at, w)
local cur, prev = 0, 0
if s[1] then
  local sw = tonumber(s[1])
  if sw == ws then
    cur, prev = tonumber(s[2]), tonumber(s[3])
  elseif sw == ws - w then
    prev = tonumber(s[2])
  end
end

local el = at - ws
local p = weigh(prev, el)
local allowed, reset, retry = 0, 0, 0
if fits(p, cur) then
  cur = cur + c
  allowed = 1
  redis.call('HSET', KEYS[1], 'w', string.format('%d', ws), 'c', string.format('%d', cur),
    'p', string.format('%d', prev), 't', string.format('%d', at))
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.max(ms(ws + 2 * w - now), minttl)))
else
  local need = l - cur - c
  if need >= 0 then
    -- The previous window's weight blocks; it decays to nothing at the
    -- window's end, where cur + c <= l passes. Find the first el at which
    -- the admission test passes, from the estimate prev*(W-el)/W = need.
    local est = w - math.floor(math.min(need * w / prev, w))
    local first = firstPass(el, w, est, function(e) return fits(weigh(prev, e), cur) end)
    retry = ws + first - at
  else
    -- This window's own count blocks: wait into the next window, where
    -- cur becomes the previous count and the new window starts empty.
    local est = w - math.floor(math.min((l - c) * w / cur, w))
    local first = firstPass(0, w, est, function(e) return fits(weigh(cur, e), 0) end)
    retry = ws + w + first - at
  end
end
local remaining = math.max(0, math.floor(l - (p + cur)))
if cur > 0 then
  reset = ws + 2 * w - at
elseif prev > 0 then
  reset = ws + w - at
end
return {allowed, remaining, ms(reset), ms(retry), 0}
