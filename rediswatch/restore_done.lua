-- Ends a write-back (restore_claim.lua) by setting the marker, or a merge
-- by raising the version the bans written back are known up to. Run
-- again, it does nothing more.
--
-- KEYS[1] .. KEYS[3]  the marker, the recovery journal, the version
--          (restore_claim.lua)
-- KEYS[4]  the lease (restore_claim.lua)
-- ARGV[1]  the mode: "created" or "merged"
-- ARGV[2]  the caller's token
-- ARGV[3]  the epoch
-- ARGV[4]  the version up to which the caller's bans are known, or "" if
--          it merged none
-- Returns  "ok", or "lost" when the caller no longer holds the lease
--          (created) or the marker is not of the epoch (merged).
local e = redis.call('HGET', KEYS[1], 'e')
if ARGV[1] == 'merged' then
  if e ~= ARGV[3] then
    return 'lost'
  end
  local known = tonumber(ARGV[4])
  if known and known > (tonumber(redis.call('HGET', KEYS[1], 'r') or '') or 0) then
    redis.call('HSET', KEYS[1], 'r', ARGV[4])
  end
  return 'ok'
end
if e == ARGV[3] then
  return 'ok' -- a retry of this call
elseif e or redis.call('GET', KEYS[4]) ~= ARGV[2] then
  return 'lost'
end
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local seq = tonumber(redis.call('GET', KEYS[3]) or '') or 0
if seq < now_us then
  seq = now_us
end
-- A version no server holds: every server reloads once it has merged.
redis.call('SET', KEYS[3], string.format('%d', seq + 1))
redis.call('HSET', KEYS[1], 'e', ARGV[3], 'r', ARGV[4])
redis.call('HDEL', KEYS[2], '\1')
redis.call('DEL', KEYS[4])
return 'ok'
