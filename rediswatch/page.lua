-- Reads one page of a load (load.lua): a ZSCAN of the index and the bans
-- it names; writes nothing.
--
-- KEYS[1]  the index (ban.lua)
-- ARGV[1]  the ZSCAN cursor ("0" to start)
-- ARGV[2]  the ZSCAN COUNT
-- ARGV[3]  Redis's time at the load's start, in ms: ids scored at or
--          before it have expired, and are skipped
-- ARGV[4]  the least score taken (load.lua's floor)
-- ARGV[5]  the prefix of the bans' keys ("{<key>}:b:"): they share the
--          index's hash tag, and so its slot, on a Redis Cluster
-- Returns  {next cursor ("0" at the end), id1, value1, id2, ...}: the ids
--          of the page that have a ban, with its value. ZSCAN may return
--          an id in two pages.
local scan = redis.call('ZSCAN', KEYS[1], ARGV[1], 'COUNT', tonumber(ARGV[2]))
local now = tonumber(ARGV[3])
local floor = tonumber(ARGV[4])
local out = {scan[1]}
local pairs = scan[2]
for i = 1, #pairs - 1, 2 do
  local score = tonumber(pairs[i + 1])
  if score and score > now and score >= floor then
    local value = redis.call('GET', ARGV[5] .. pairs[i])
    if value then
      out[#out + 1] = pairs[i]
      out[#out + 1] = value
    end
  end
end
return out
