-- Lockout: the wrapper of an algorithm's script for a policy with a
-- core.Lockout. The Store sends the prelude, then the algorithm's script
-- as the body of "local function decide() ... end", then this, as one
-- script: one round trip decides the lockout and the algorithm together.
-- Mirrors takeLocked in core/memstore/lockout.go, operation for operation.
--
-- KEYS[2]  the lockout of the client key under the policy, a HASH: field
--          'u', the end of the lockout (µs); 's', the strikes; 'o', the
--          time of the last offence (µs); 'r', when the algorithm's quota
--          is whole again, as of the offence (µs). Same hash tag as
--          KEYS[1], so the same Redis Cluster slot.
-- ARGV[7]  lock_duration: the first lockout, in microseconds
-- ARGV[8]  lock_max: the longest lockout, in microseconds (>= duration)
-- ARGV[9]  lock_memory: how long strikes are remembered after the last
--          offence, in microseconds
-- Returns  the algorithm's reply (its six integers, now the sixth) and a
--          seventh, locked_out (1 or 0).
--
-- A locked-out client is denied without calling decide: the algorithm's
-- state is not touched. A denial of decide is an offence: one more strike
-- (at most 64) and a lockout of lock_duration * 2^(strikes-1), capped at
-- lock_max, or until the algorithm would admit the request again if that
-- is later. The key lives until the later of the lockout's end and the
-- strikes' memory, at least min_ttl. A peek (cost 0) is denied as any
-- request is during a lockout; otherwise decide's reply is its own, and a
-- denied peek strikes nothing.

local lock_duration = tonumber(ARGV[7])
local lock_max = tonumber(ARGV[8])
local lock_memory = tonumber(ARGV[9])

local strikes = 0
local lock = redis.call('HMGET', KEYS[2], 'u', 's', 'o', 'r')
if lock[1] then
  local lock_until, offence, reset_at = tonumber(lock[1]), tonumber(lock[3]), tonumber(lock[4])
  if now < lock_until then
    return {0, 0, ms_up(math.max(lock_until, reset_at) - now), ms_up(lock_until - now), 0, now, 1}
  end
  if now < offence + lock_memory then
    strikes = tonumber(lock[2])
  end
end

local reply = decide()
if reply[1] == 1 or cost == 0 then
  reply[7] = 0
  return reply
end

strikes = math.min(strikes + 1, 64)
-- Exact: a power of two times an integer, compared before any rounding
-- could matter (both are far below 2^53 whenever the product is <= max).
local length = math.min(lock_duration * 2 ^ (strikes - 1), lock_max)
local lock_until = now + math.max(length, reply[4] * 1000)
local reset_at = now + reply[3] * 1000
redis.call('HSET', KEYS[2], 'u', string.format('%d', lock_until), 's', string.format('%d', strikes),
  'o', string.format('%d', now), 'r', string.format('%d', reset_at))
redis.call('PEXPIRE', KEYS[2], string.format('%d', math.max(ms_up(math.max(lock_until, now + lock_memory) - now), min_ttl)))
return {0, 0, ms_up(math.max(lock_until, reset_at) - now), ms_up(lock_until - now), 0, now, 1}
