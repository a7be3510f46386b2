-- Fixed window: one counter per window aligned to the Unix epoch. Mirrors
-- fixedWindow in core/memstore/algo.go, operation for operation (Lua
-- numbers are float64, as there). It ignores capacity: cost is in
-- [0, limit], 0 for a peek.
--
-- KEYS[1] is a string (read_state in prelude.lua), '<ddd': the start of
-- the counted window (µs), the units admitted in it, and the time of the
-- last admission (µs). An admitted request rewrites it; its TTL is the end
-- of the window. delay_ms is 0.

local stored_start, stored_count, last = read_state(KEYS[1], '<ddd', 'w', 'n', 't')
local at = earliest
if stored_start then
  at = math.max(earliest, last or earliest)
end
-- math.fmod truncates like Go's %, and is exact.
local window_start = at - math.fmod(at, window)
local count = 0
if stored_start == window_start then
  count = stored_count
end

local allowed, reset, retry = 0, 0, 0
if count + ask <= limit then
  allowed = 1
  if cost > 0 then
    count = count + cost
    write_state(KEYS[1], math.max(ms_up(window_start + window - now), min_ttl), '<ddd', window_start, count, at)
  end
else
  retry = window_start + window - at
end
if count > 0 then
  reset = window_start + window - at
end
-- count exceeds limit when the client was moved to a smaller plan.
return {allowed, math.max(0, limit - count), ms_up(reset), ms_up(retry), 0, at}
