-- Sets or deletes one override, unless Redis lost its data (the marker is
-- gone): the caller then restores first (restore.lua) and writes again,
-- so that a write never marks a Redis that lost the others as whole.
--
-- KEYS[1], KEYS[2]  the hash, the marker (read.lua)
-- ARGV[1]  the field (a layer's name)
-- ARGV[2]  the override's text to set; absent to delete the field
-- Returns  1 when written, 0 when the marker is missing.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
if ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 1
