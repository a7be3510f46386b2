-- Leaky bucket as a meter and a shaper: a queue capacity deep, drained at
-- limit per window. Mirrors leakyBucket in core/memstore/algo.go, operation
-- for operation (Lua numbers are float64, as there).
--
-- KEYS[1] is a string (read_state in prelude.lua), '<dd': the queue's level and
-- the time of the last admission. An admitted request rewrites it; its TTL
-- is the time the queue is empty again (at least 1 ms). delay_ms is how
-- long an admitted request waits in the queue.

local at, level = earliest, 0
local stored_level, last = read_state(KEYS[1], '<dd', 'v', 't')
if stored_level then
  -- The state expires when the queue is empty again: from then on it
  -- decides like no state at all, whatever the key's remaining TTL.
  if now >= last + math.ceil(stored_level * window / limit) then
    stored_level = nil
  end
end

-- level_at is the queue elapsed microseconds after the last admission.
local function level_at(elapsed)
  return math.max(0, stored_level - elapsed * limit / window)
end

if stored_level then
  at = math.max(earliest, last)
  level = level_at(at - last)
end

local allowed, retry, delay = 0, 0, 0
if level + ask <= capacity then
  delay = math.ceil(level * window / limit)
  if cost > 0 then
    level = level + cost
  end
  allowed = 1
else
  -- Not fresh: an empty queue has room for cost <= capacity, and the
  -- state decides like none from its expiry on.
  -- From the last admission (leakyEstimate in core/memstore/algo.go).
  local elapsed = at - last
  local estimate = math.ceil((stored_level - sum_bound(capacity, ask, true)) * window / limit) - elapsed
  local expires = last + math.ceil(stored_level * window / limit)
  retry = first_pass(0, math.min(expires - at, horizon), estimate, function(k) return level_at(elapsed + k) + ask <= capacity end)
end
-- The level exceeds capacity when the client was moved to a smaller plan.
local remaining = math.max(0, math.floor(capacity - level))
local reset = math.min(math.ceil(level * window / limit), horizon)
if allowed == 1 and cost > 0 then
  write_state(KEYS[1], math.max(ms_up(at + reset - now), 1, min_ttl), '<dd', level, at)
end
return {allowed, remaining, ms_up(reset), ms_up(retry), ms_up(delay), at}
