-- Starts a load; writes nothing. The load then reads the index in pages
-- (ZSCAN) and the bans of each page (MGET); see load.go.
--
-- KEYS[1] .. KEYS[4]  the index, the version, the log, the marker (ban.lua)
-- ARGV[1]  the most ids a load takes
-- Returns  {version ("" if none), now_ms, live, epoch, restored, cursor,
--          floor}, strings: live is how many ids the index holds that
--          expire after now (permanent ones included); epoch and
--          restored are the marker's (restore.lua; "" if it is gone);
--          cursor is the stream id of the log's last entry ("0-0" if
--          none), from which the changes made during the load are read;
--          floor is the least score a load takes: "-inf", or, when live
--          is over ARGV[1], the score of the ARGV[1]-th id from the top,
--          so that it takes the permanent bans first, then the latest to
--          expire. Every command is O(log n): it holds Redis for
--          microseconds whatever the index holds.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local version = redis.call('GET', KEYS[2]) or ''
local marker = redis.call('HMGET', KEYS[4], 'e', 'r')
local cursor = '0-0'
if redis.call('TYPE', KEYS[3]).ok == 'stream' then
  local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
  if #last > 0 then
    cursor = last[1][1]
  end
end
local live = redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%d', now), '+inf')
local floor = '-inf'
local most = tonumber(ARGV[1])
if live > most then
  local at = redis.call('ZRANGE', KEYS[1], most - 1, most - 1, 'REV', 'WITHSCORES')
  floor = at[2]
end
return {version, string.format('%d', now), string.format('%d', live), marker[1] or '', marker[2] or '', cursor, floor}
