-- Starts writing back what a server knows into a Redis that lost its
-- data, or merging it into what another server wrote back; see
-- recover.go. The journal entries and the bans follow in pages
-- (restore.lua), then restore_done.lua ends it.
--
-- KEYS[1]  the marker: a hash, e the epoch (when it was made, in Redis
--          microseconds), r the version up to which the bans written
--          back are known (the restorer's)
-- KEYS[2]  the recovery journal: a hash, id -> sequence number of the
--          last change known of each target, for changes that servers
--          knew at the loss and changes made since; it lives ARGV[3] ms.
--          While a write-back is under way its field "\1" is its epoch
-- KEYS[3]  the version (ban.lua)
-- KEYS[4]  the lease: the token of the server writing back, which each
--          page renews; it ends ARGV[5] ms after the last
-- ARGV[1]  the epoch the caller last read ("" if none)
-- ARGV[2]  the version up to which the caller's bans are known
-- ARGV[3]  how long the recovery journal lives, in ms
-- ARGV[4]  the caller's token
-- ARGV[5]  how long the lease lasts, in ms
-- Returns  {mode, epoch, restored}: restored is the version up to which
--          the bans written back are known ("-1" when Redis knows none);
--          mode is
--          "created"  the marker is gone: the caller holds the lease and
--                     writes back its journal and its bans (a ban where
--                     Redis has none), then sets the marker. A write-back
--                     whose lease ran out is taken over, with its journal
--          "busy"     another server holds the lease: wait for its marker
--          "marked"   the marker was gone but not the version, which is
--                     at least the caller's: only the marker was lost; it
--                     is set, and nothing is written
--          "merged"   another server wrote back: the caller's journal
--                     entries later than what Redis knows of their target
--                     are to be written, and its bans too (where Redis has
--                     none and knows no change) when they are known up to
--                     a later version than those written back
--          "late"     the recovery journal is gone: nothing is merged
--          "same"     the marker is the caller's epoch: nothing to do
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local marker = redis.call('HMGET', KEYS[1], 'e', 'r')
local epoch = marker[1]
if epoch then
  if epoch == ARGV[1] then
    return {'same', epoch, ''}
  elseif redis.call('TYPE', KEYS[2]).ok ~= 'hash' then
    return {'late', epoch, ''}
  end
  return {'merged', epoch, marker[2] or '0'}
end
local holder = redis.call('GET', KEYS[4])
if holder and holder ~= ARGV[4] then
  return {'busy', '', ''}
end
local known = tonumber(ARGV[2]) or 0
local prev = redis.call('GET', KEYS[3]) or ''
local v = tonumber(prev)
if not holder and v and v >= known then
  epoch = string.format('%d', now_us)
  redis.call('HSET', KEYS[1], 'e', epoch, 'r', prev)
  return {'marked', epoch, prev}
end
epoch = redis.call('HGET', KEYS[2], '\1')
if not epoch then
  epoch = string.format('%d', now_us)
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], '\0', epoch, '\1', epoch)
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('SET', KEYS[4], ARGV[4], 'PX', ARGV[5])
return {'created', epoch, '-1'}
