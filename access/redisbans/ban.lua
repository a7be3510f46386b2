-- Adds or replaces one ban, and bumps the version.
--
-- KEYS[1]  the ban: a string "v1|<expires_ms>|<reason>", expires_ms 0 for
--          a permanent ban, which has no TTL; else it expires (PXAT) when
--          the ban does
-- KEYS[2]  the index: a sorted set of target ids, scored by expires_ms
--          (inf for a permanent ban)
-- KEYS[3]  the version: bumped by every change to max(version + 1, Redis
--          TIME in microseconds), so that it grows even after a Redis
--          restart that lost it, and servers polling it see the change
-- ARGV[1]  the target id ("p:" and a range, or "k:" and a key)
-- ARGV[2]  "ever", "for" (ARGV[3] a TTL in ms) or "until" (ARGV[3] an
--          instant in Unix ms)
-- ARGV[3]  the TTL or the instant, an integer
-- ARGV[4]  the reason, checked by the caller
-- ARGV[5]  the most bans the index may hold
-- Returns  {expires_ms, now_ms}, integers written with %d; or an error
--          reply "EXPIRED ..." (an instant not after Redis's now) or
--          "TOOMANY ..." (the index is full and the target not in it).
--
-- Times are milliseconds (microseconds for the version) and Lua numbers
-- float64, exact up to 2^53; they are written with string.format('%d'),
-- never tostring or '..', which keep only 14 digits.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])

-- Bans whose TTL has run out have left KEYS; their ids leave the index.
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)

local expires = 0
if ARGV[2] == 'for' then
  expires = now + tonumber(ARGV[3])
elseif ARGV[2] == 'until' then
  expires = tonumber(ARGV[3])
  if expires <= now then
    return redis.error_reply('EXPIRED the ban ends at ' .. string.format('%d', expires) .. ' ms, not after now, ' .. string.format('%d', now) .. ' ms')
  end
end

if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  local held = redis.call('ZCARD', KEYS[2])
  if held >= tonumber(ARGV[5]) then
    return redis.error_reply('TOOMANY ' .. string.format('%d', held) .. ' bans held, the maximum')
  end
end

local value = 'v1|' .. string.format('%d', expires) .. '|' .. ARGV[4]
if expires == 0 then
  redis.call('SET', KEYS[1], value)
  redis.call('ZADD', KEYS[2], 'inf', ARGV[1])
else
  redis.call('SET', KEYS[1], value, 'PXAT', string.format('%d', expires))
  redis.call('ZADD', KEYS[2], string.format('%d', expires), ARGV[1])
end

local version = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
if now_us <= version then
  now_us = version + 1
end
redis.call('SET', KEYS[3], string.format('%d', now_us))
return {string.format('%d', expires), string.format('%d', now)}
