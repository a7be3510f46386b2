-- Writes a watcher's last good overrides back into a Redis that lost
-- them, and sets the marker, at once; does nothing when the marker exists
-- (another watcher restored first, or nothing was lost).
--
-- KEYS[1], KEYS[2]  the hash, the marker (read.lua)
-- ARGV     name1, value1, name2, value2, ...: the overrides to write back
--          where the hash has no such field (HSETNX: a field written since
--          the loss wins)
-- Returns  the number of fields written, or -1 when the marker exists.
if redis.call('EXISTS', KEYS[2]) == 1 then
  return -1
end
local written = 0
for i = 1, #ARGV, 2 do
  written = written + redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[2], '1')
return written
