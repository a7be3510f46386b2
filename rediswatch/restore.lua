-- Writes what a server knows back into a Redis that lost its data, or
-- merges it into what another server wrote back; see recover.go.
--
-- KEYS[1]  the marker: a hash, e the epoch (when it was made, in Redis
--          microseconds), r the version up to which the bans written
--          back are known (the restorer's)
-- KEYS[2]  the recovery journal: a hash, id -> sequence number of the
--          last change known of each target, for changes that servers
--          knew at the loss and changes made since; it lives ARGV[3] ms
-- KEYS[3] .. KEYS[5]  the index, the version, the log (ban.lua)
-- KEYS[5 + n]  the ban of journal entry n, then those of the bans
-- ARGV[1]  the epoch the caller last read ("" if none)
-- ARGV[2]  the version up to which the caller's bans are known
-- ARGV[3]  how long the recovery journal lives, in ms
-- ARGV[4]  "1" if the caller's bans follow its journal, else "0"
-- ARGV[5]  how many journal entries follow
-- ARGV[6]  the length of the log
-- ARGV[7 + 4(n-1)] ..  journal entry n: id, seq, value ("" for a lift),
--          expires_ms (0 if permanent)
-- then     each ban: id, value, expires_ms
-- Returns  {mode, epoch, written}: mode is
--          "created"  the marker was gone: the caller's bans and journal
--                     are written back (a ban where Redis has none)
--          "marked"   the marker was gone but not the version, which is
--                     at least the caller's: only the marker was lost,
--                     nothing is written
--          "merged"   another server wrote back first: the caller's
--                     journal entries that are later than what Redis
--                     knows of their target are written, and its bans too
--                     (where Redis has none and knows no change) when
--                     they are known up to a later version than those
--                     written back
--          "late"     the recovery journal is gone: nothing is merged
--          "same"     the marker is the caller's epoch: nothing to do
--          "retry"    the marker is gone and the bans did not follow
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local marker = redis.call('HMGET', KEYS[1], 'e', 'r')
local epoch = marker[1]
local known = tonumber(ARGV[2]) or 0
local withBans = ARGV[4] == '1'
local nj = tonumber(ARGV[5])
local prev = redis.call('GET', KEYS[4]) or ''
local mode
local restored
if not epoch then
  if not withBans then
    return {'retry', '', '0'}
  end
  epoch = string.format('%d', now_us)
  local v = tonumber(prev)
  if v and v >= known then
    redis.call('HSET', KEYS[1], 'e', epoch, 'r', prev)
    return {'marked', epoch, '0'}
  end
  mode = 'created'
  restored = -1 -- Redis knows nothing: every journal entry is news
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], '\0', epoch)
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
elseif epoch == ARGV[1] then
  return {'same', epoch, '0'}
elseif redis.call('TYPE', KEYS[2]).ok ~= 'hash' then
  return {'late', epoch, '0'}
else
  mode = 'merged'
  restored = tonumber(marker[2]) or 0
end

local logType = redis.call('TYPE', KEYS[5]).ok
if logType ~= 'stream' and logType ~= 'none' then
  redis.call('DEL', KEYS[5])
end
local seq = tonumber(prev) or 0
if seq < now_us then
  seq = now_us
end
local last = prev
local written = 0
-- A merge logs each write, so that the servers already in this epoch
-- apply it as any change; a creation only bumps the version: every
-- server reloads once it has merged.
local function logged(op, id, value)
  written = written + 1
  if mode ~= 'merged' then
    return
  end
  seq = seq + 1
  local s = string.format('%d', seq)
  if op == 'b' then
    redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[6], '*', 's', s, 'p', last, 'o', 'b', 'i', id, 'v', value)
  else
    redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[6], '*', 's', s, 'p', last, 'o', 'u', 'i', id)
  end
  last = s
end

local function put(key, id, value, e, nx)
  local ok
  if e == 0 then
    if nx then
      ok = redis.call('SET', key, value, 'NX')
    else
      ok = redis.call('SET', key, value)
    end
    if ok then
      redis.call('ZADD', KEYS[3], 'inf', id)
    end
  else
    if nx then
      ok = redis.call('SET', key, value, 'PXAT', string.format('%d', e), 'NX')
    else
      ok = redis.call('SET', key, value, 'PXAT', string.format('%d', e))
    end
    if ok then
      redis.call('ZADD', KEYS[3], string.format('%d', e), id)
    end
  end
  if ok then
    logged('b', id, value)
  end
end

-- The journal: a change later than any Redis knows of its target wins.
-- Redis knows a target's change by the recovery journal, or, lacking it,
-- by the version its bans were written back at: a change up to that
-- version is in them already.
for i = 1, nj do
  local a = 6 + (i - 1) * 4
  local id, s, value, e = ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 3], tonumber(ARGV[a + 4])
  local cur = tonumber(redis.call('HGET', KEYS[2], id) or '')
  if (cur and cur < s) or (not cur and s > restored) then
    local key = KEYS[5 + i]
    if value == '' or (e ~= 0 and e <= now) then
      if redis.call('DEL', key) + redis.call('ZREM', KEYS[3], id) > 0 then
        logged('u', id, '')
      end
    else
      put(key, id, value, e, false)
    end
    redis.call('HSET', KEYS[2], id, string.format('%d', s))
  end
end

-- The bans, where Redis has none and knows no change of the target.
if withBans and (mode == 'created' or known > restored) then
  local base = 6 + nj * 4
  local nb = (#ARGV - base) / 3
  for k = 1, nb do
    local a = base + (k - 1) * 3
    local id, value, e = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
    if (e == 0 or e > now) and redis.call('HEXISTS', KEYS[2], id) == 0 then
      put(KEYS[5 + nj + k], id, value, e, true)
    end
  end
  redis.call('HSET', KEYS[1], 'e', epoch, 'r', string.format('%d', known))
end

if mode == 'created' then
  last = string.format('%d', seq + 1)
end
if last ~= prev then
  redis.call('SET', KEYS[4], last)
end
return {mode, epoch, string.format('%d', written)}
