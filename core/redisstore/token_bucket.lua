-- Token bucket: up to capacity tokens, refilled continuously at limit per
-- window. Mirrors tokenBucket in core/memstore/algo.go, operation for
-- operation (Lua numbers are float64, as there).
--
-- KEYS[1] is a string (read_state in prelude.lua), '<dd': the tokens left and
-- the time of the last admission. An admitted request rewrites it; its TTL
-- is the time the bucket is full again (at least 1 ms). delay_ms is 0.

local at, tokens = now, capacity
local stored_tokens, last = read_state(KEYS[1], '<dd', 'v', 't')
if stored_tokens then
  -- The state expires when the bucket is full again: from then on it
  -- decides like no state at all, whatever the key's remaining TTL.
  if now >= last + math.ceil((capacity - stored_tokens) * window / limit) then
    stored_tokens = nil
  end
end

-- tokens_at is the bucket elapsed microseconds after the last admission.
local function tokens_at(elapsed)
  return math.min(capacity, stored_tokens + elapsed * limit / window)
end

if stored_tokens then
  at = math.max(now, last)
  tokens = tokens_at(at - last)
end

local allowed, retry = 0, 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  -- Not fresh: a fresh bucket holds capacity >= cost tokens. So does the
  -- state from its expiry on, when it decides like none.
  -- From the last admission: where the refill reaches cost - level less
  -- half the gap below cost (tokenEstimate in core/memstore/algo.go).
  local elapsed = at - last
  local estimate = math.ceil((cost - stored_tokens - half_gap_below(cost)) * window / limit) - elapsed
  local expires = last + math.ceil((capacity - stored_tokens) * window / limit)
  retry = first_pass(0, expires - at, estimate, function(k) return tokens_at(elapsed + k) >= cost end)
end
local remaining = math.floor(tokens)
local reset = math.ceil((capacity - tokens) * window / limit)
if allowed == 1 then
  write_state(KEYS[1], math.max(ms_up(at + reset - now), 1, min_ttl), '<dd', tokens, at)
end
return {allowed, remaining, ms_up(reset), ms_up(retry), 0}
