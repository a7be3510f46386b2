-- Token bucket: capacity tokens, refilled continuously at limit per
-- window, kept as the level of the tokens taken (the units used), which
-- drains at limit per window: a request passes when level + cost <=
-- capacity. Mirrors bucket in core/memstore/algo.go, operation for
-- operation (Lua numbers are float64, as there): the leaky bucket's
-- arithmetic, but an admitted request passes at once.
--
-- KEYS[1] is a string (read_state in prelude.lua), '<dd': the level and
-- the time of the last admission. An admitted request rewrites it; its TTL
-- is the time the level has drained (at least 1 ms). delay_ms is 0.
--
-- The level is the usage, not the tokens left, so that a client moved to
-- another plan (same policy name, another limit or burst) keeps it. It
-- drains at the rate of the plan in force, and is forgotten once drained
-- at that rate, or when the key's TTL, set by the plan that wrote it,
-- runs out, whichever comes first.

local at, level = earliest, 0
local stored_level, last = read_state(KEYS[1], '<dd', 'v', 't')
local expires
if stored_level then
  -- The state expires when the level has drained: from then on it
  -- decides like no state at all, whatever the key's remaining TTL.
  expires = last + math.ceil(stored_level * window / limit)
  if now >= expires then
    stored_level = nil
  end
end

-- level_at is the level elapsed microseconds after the last admission.
local function level_at(elapsed)
  return math.max(0, stored_level - elapsed * limit / window)
end

if stored_level then
  at = math.max(earliest, last)
  level = level_at(at - last)
end

local allowed, retry = 0, 0
if level + ask <= capacity then
  if cost > 0 then
    level = level + cost
  end
  allowed = 1
else
  -- Not fresh: an empty bucket has room for cost <= capacity, and the
  -- state decides like none from its expiry on.
  -- From the last admission (leakyEstimate in core/memstore/algo.go).
  local elapsed = at - last
  local estimate = math.ceil((stored_level - sum_bound(capacity, ask, true)) * window / limit) - elapsed
  retry = first_pass(0, math.min(expires - at, horizon), estimate, function(k) return level_at(elapsed + k) + ask <= capacity end)
end
-- The level exceeds capacity when the client was moved to a smaller plan.
local remaining = math.max(0, math.floor(capacity - level))
local reset = math.min(math.ceil(level * window / limit), horizon)
if allowed == 1 and cost > 0 then
  write_state(KEYS[1], math.max(ms_up(at + reset - now), 1, min_ttl), '<dd', level, at)
end
return {allowed, remaining, ms_up(reset), ms_up(retry), 0, at}
