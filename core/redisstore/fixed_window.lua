-- Fixed window: one counter per window of W microseconds aligned to the
-- Unix epoch. Mirrors fixedWindow in core/memstore/algo.go, operation for
-- operation (Lua numbers are float64, as there).
--
-- KEYS[1]  the state, a HASH: w = window start (µs), n = units admitted in
--          it, t = time of the last admission (µs)
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
-- admitted one rewrites the HASH and sets its TTL to the end of the window.
--
-- prelude.lua comes first: it reads ARGV into l, w, b, c, now and
-- minttl and defines ms and firstPass.

local s = redis.call('HMGET', KEYS[1], 'w', 'n', 't')
local at = now
if s[1] then
  at = math.max(now, tonumber(s[3]) or now)
end
-- math.fmod truncates like Go's %, and is exact.
local ws = at - math.fmod(at, w)
local n = 0
if s[1] and tonumber(s[1]) == ws then
  n = tonumber(s[2])
end

local allowed, reset, retry = 0, 0, 0
if n + c <= l then
  n = n + c
  allowed = 1
  redis.call('HSET', KEYS[1], 'w', string.format('%d', ws), 'n', string.format('%d', n),
    't', string.format('%d', at))
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.max(ms(ws + w - now), minttl)))
else
  retry = ws + w - at
end
if n > 0 then
  reset = ws + w - at
end
return {allowed, l - n, ms(reset), ms(retry), 0}
