-- Fixed window: one counter per window aligned to the Unix epoch. Mirrors
-- fixedWindow in core/memstore/algo.go, operation for operation (Lua
-- numbers are float64, as there). It ignores capacity: cost is in
-- [1, limit].
--
-- KEYS[1] is a HASH: field 'w', the start of the counted window (µs); 'n',
-- the units admitted in it; 't', the time of the last admission (µs). An
-- admitted request rewrites all three; its TTL is the end of the window.
-- delay_ms is 0.

local stored = redis.call('HMGET', KEYS[1], 'w', 'n', 't')
local at = now
if stored[1] then
  at = math.max(now, tonumber(stored[3]) or now)
end
-- math.fmod truncates like Go's %, and is exact.
local window_start = at - math.fmod(at, window)
local count = 0
if stored[1] and tonumber(stored[1]) == window_start then
  count = tonumber(stored[2])
end

local allowed, reset, retry = 0, 0, 0
if count + cost <= limit then
  count = count + cost
  allowed = 1
  redis.call('HSET', KEYS[1], 'w', string.format('%d', window_start), 'n', string.format('%d', count),
    't', string.format('%d', at))
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.max(ms_up(window_start + window - now), min_ttl)))
else
  retry = window_start + window - at
end
if count > 0 then
  reset = window_start + window - at
end
return {allowed, limit - count, ms_up(reset), ms_up(retry), 0}
