-- Reads the index for a full load; writes nothing.
--
-- KEYS[1] .. KEYS[4]  the index, the version, the log, the marker (ban.lua)
-- ARGV[1]  the most ids to return
-- Returns  {version ("" if none), now_ms, live, epoch, restored, cursor,
--          id1, expires1, id2, ...}: live is how many ids the index holds
--          that expire after now (permanent ones included); epoch and
--          restored are the marker's (restore.lua; "" if it is gone);
--          cursor is the stream id of the log's last entry ("0-0" if
--          none), from which the changes after this load are read. At
--          most ARGV[1] ids follow, the permanent ones first, then the
--          latest to expire; expires is "inf" for a permanent ban, else
--          ms, as ZRANGE writes scores.
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
local after = '(' .. string.format('%d', now)
local live = redis.call('ZCOUNT', KEYS[1], after, '+inf')
local ids = redis.call('ZRANGE', KEYS[1], '+inf', after, 'BYSCORE', 'REV', 'LIMIT', 0, tonumber(ARGV[1]), 'WITHSCORES')
local out = {version, string.format('%d', now), live, marker[1] or '', marker[2] or '', cursor}
for i = 1, #ids do
  out[#out + 1] = ids[i]
end
return out
