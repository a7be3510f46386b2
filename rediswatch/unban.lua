-- Lifts one ban; if anything was removed, logs the change and bumps the
-- version (ban.lua), at once.
--
-- KEYS[1] .. KEYS[5]  the index, the version, the log, the marker, the
--          recovery journal (ban.lua)
-- KEYS[6]  the ban
-- ARGV[1]  the target id
-- ARGV[2]  the length of the log
-- Returns  {"0", version} when nothing was removed, else {live, version
--          before, seq, stream id}, strings; live is 1 if the ban was in
--          force (its key still there), else 0. Or an error reply
--          "LOST ..." (the marker is gone), having written nothing.
if redis.call('EXISTS', KEYS[4]) == 0 then
  return redis.error_reply('LOST the marker key is gone: Redis lost its data')
end
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local prev = redis.call('GET', KEYS[2]) or ''
local logType = redis.call('TYPE', KEYS[3]).ok
local journal = redis.call('TYPE', KEYS[5]).ok == 'hash'
local indexed = redis.call('ZREM', KEYS[1], ARGV[1])
local live = redis.call('DEL', KEYS[6])
if live + indexed == 0 then
  return {'0', prev}
end
local seq = tonumber(prev) or 0
if seq < now_us then
  seq = now_us
else
  seq = seq + 1
end
local s = string.format('%d', seq)
if logType ~= 'stream' and logType ~= 'none' then
  redis.call('DEL', KEYS[3])
end
local id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[2], '*', 's', s, 'p', prev, 'o', 'u', 'i', ARGV[1])
if journal then
  redis.call('HSET', KEYS[5], ARGV[1], s)
end
redis.call('SET', KEYS[2], s)
return {string.format('%d', live), prev, s, id}
