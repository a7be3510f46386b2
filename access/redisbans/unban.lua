-- Lifts one ban, and bumps the version if anything was removed.
--
-- KEYS[1], KEYS[2], KEYS[3]  the ban, the index, the version (ban.lua)
-- ARGV[1]  the target id
-- Returns  1 if the ban was in force (its key still there), else 0.
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])

local live = redis.call('DEL', KEYS[1])
local indexed = redis.call('ZREM', KEYS[2], ARGV[1])
if live + indexed > 0 then
  local version = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
  if now_us <= version then
    now_us = version + 1
  end
  redis.call('SET', KEYS[3], string.format('%d', now_us))
end
return live
