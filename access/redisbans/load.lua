-- Reads the index for a full load; writes nothing.
--
-- KEYS[1], KEYS[2]  the index, the version (ban.lua)
-- ARGV[1]  the most ids to return
-- Returns  {version ("" if none), now_ms, live, id1, expires1, id2, ...}:
--          live is how many ids the index holds that expire after now
--          (permanent ones included); at most ARGV[1] of them follow, the
--          permanent ones first, then the latest to expire. expires is
--          "inf" for a permanent ban, else ms, as ZRANGE writes scores.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local version = redis.call('GET', KEYS[2]) or ''
local after = '(' .. string.format('%d', now)
local live = redis.call('ZCOUNT', KEYS[1], after, '+inf')
local ids = redis.call('ZRANGE', KEYS[1], '+inf', after, 'BYSCORE', 'REV', 'LIMIT', 0, tonumber(ARGV[1]), 'WITHSCORES')
local out = {version, string.format('%d', now), live}
for i = 1, #ids do
  out[#out + 1] = ids[i]
end
return out
