-- Sliding window counter: this and the previous epoch-aligned window's
-- counts, the previous one weighed by the part of it still inside the
-- sliding window. Mirrors slidingCounter in core/memstore/algo.go, operation
-- for operation (Lua numbers are float64, as there). It ignores capacity:
-- cost is in [0, limit], 0 for a peek.
--
-- KEYS[1] is a string (read_state in prelude.lua), '<dddd': the start of
-- the current window (µs), its count, the count of the window before it,
-- and the time of the last admission (µs). An admitted request rewrites
-- it; its TTL is the end of the next window, when this window's count
-- stops weighing. delay_ms is 0.

-- weigh is a window's count weighed by the part of it still inside the
-- sliding window, elapsed microseconds into the next one: the count itself
-- at 0 (count * window / window may round away from it), so that the
-- weight never grows with time, nor across a window's end.
local function weigh(count, elapsed)
  if elapsed == 0 then return count end
  return count * (window - elapsed) / window
end

-- fits is the admission test, for ask units (a peek's is 1).
local function fits(previous_weight, current)
  return previous_weight + current + ask <= limit
end

-- counter_estimate is the elapsed time into the window at which count,
-- weighed, falls to bound: count * (window - elapsed) / window = bound.
local function counter_estimate(count, bound)
  return window - math.floor(math.min(bound * window / count, window))
end

local stored_start, stored_current, stored_previous, last = read_state(KEYS[1], '<dddd', 'w', 'c', 'p', 't')
local at = earliest
if stored_start then
  at = math.max(earliest, last or earliest)
end
-- math.fmod truncates like Go's %, and is exact.
local window_start = at - math.fmod(at, window)
local current, previous = 0, 0
if stored_start == window_start then
  current, previous = stored_current, stored_previous
elseif stored_start == window_start - window then
  previous = stored_current
end

local elapsed = at - window_start
local previous_weight = weigh(previous, elapsed)
local allowed, reset, retry = 0, 0, 0
if fits(previous_weight, current) then
  allowed = 1
  if cost > 0 then
    current = current + cost
    write_state(KEYS[1], math.max(ms_up(window_start + 2 * window - now), min_ttl), '<dddd', window_start, current,
      previous, at)
  end
else
  local need = limit - current - ask
  if need >= 0 then
    -- The previous window's weight blocks; it decays to nothing at the
    -- window's end, where current + ask <= limit passes. Find the first
    -- elapsed time at which the admission test passes, from the estimate
    -- previous * (window - elapsed) / window + current = the largest sum
    -- the test's two roundings admit (sum_bound).
    local estimate = counter_estimate(previous, sum_bound(limit, ask, true) - current)
    local first = first_pass(elapsed, window, estimate, function(k) return fits(weigh(previous, k), current) end)
    retry = window_start + first - at
  else
    -- This window's own count blocks: wait into the next window, where
    -- current becomes the previous count and the new window starts empty.
    -- The weight is a float already: one rounding, of its sum with ask.
    local estimate = counter_estimate(current, sum_bound(limit, ask, false))
    local first = first_pass(0, window, estimate, function(k) return fits(weigh(current, k), 0) end)
    retry = window_start + window + first - at
  end
end
local remaining = math.max(0, math.floor(limit - (previous_weight + current)))
if current > 0 then
  reset = window_start + 2 * window - at
elseif previous > 0 then
  reset = window_start + window - at
end
return {allowed, remaining, ms_up(reset), ms_up(retry), 0, at}
