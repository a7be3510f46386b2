-- Adds or replaces one ban or a batch of them, logs each change and bumps
-- the version, at once.
--
-- KEYS[1]  the index: a sorted set of target ids, scored by expires_ms
--          (inf for a permanent ban)
-- KEYS[2]  the version: the sequence number of the last change. Each
--          change takes max(version + 1, Redis TIME in microseconds), so
--          that it grows even after a Redis restart that lost it
-- KEYS[3]  the log: a stream of the changes, trimmed to about ARGV[2]
--          entries; each has s (its sequence number), p (the version
--          before it), o ("b" a ban, "u" a lift), i (the target id) and,
--          for a ban, v (its value). A batch of n > 1 bans is one entry
--          with o "B", n, and i1, v1, ..., in, vn: the k-th has sequence
--          number s + k - 1
-- KEYS[4]  the marker (restore.lua): when it is gone Redis lost its data,
--          and nothing is written
-- KEYS[5]  the recovery journal (restore.lua): while it exists each
--          change is recorded in it, id -> sequence number
-- KEYS[5 + n]  the ban of entry n: a string "v1|<expires_ms>|<reason>",
--          expires_ms 0 for a permanent ban, which has no TTL; else it
--          expires (PXAT) when the ban does
-- ARGV[1]  the most bans the index may hold
-- ARGV[2]  the length of the log
-- ARGV[3 + 4(n-1)] ..  entry n: the target id ("p:" and a range, or "k:"
--          and a key); "ever", "for" (then a TTL in ms) or "until" (then
--          an instant in Unix ms); the TTL or the instant, an integer; the
--          reason, checked by the caller
-- Returns  {now_ms, version before, stream id of the last entry logged,
--          expires_ms 1, seq 1, expires_ms 2, seq 2, ...}, strings; or an
--          error reply "LOST ..." (the marker is gone), "EXPIRED <n> ..."
--          (entry n's instant is not after Redis's now) or "TOOMANY ..."
--          (the index would hold more than ARGV[1]), having written
--          nothing.
--
-- Times are milliseconds (microseconds for the version) and Lua numbers
-- float64, exact up to 2^53; they are written with string.format('%d'),
-- never tostring or '..', which keep only 14 digits.
if redis.call('EXISTS', KEYS[4]) == 0 then
  return redis.error_reply('LOST the marker key is gone: Redis lost its data')
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local n = (#ARGV - 2) / 4

-- Bans whose TTL has run out have left KEYS; their ids leave the index.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)

-- Check everything before the first write, so that an error writes nothing.
local expires = {}
local fresh = {}
local added = 0
for i = 1, n do
  local a = 2 + (i - 1) * 4
  local id, mode, arg = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local e = 0
  if mode == 'for' then
    e = now + tonumber(arg)
  elseif mode == 'until' then
    e = tonumber(arg)
    if e <= now then
      return redis.error_reply('EXPIRED ' .. i .. ' the ban ends at ' .. string.format('%d', e) .. ' ms, not after now, ' .. string.format('%d', now) .. ' ms')
    end
  end
  expires[i] = e
  if not fresh[id] and not redis.call('ZSCORE', KEYS[1], id) then
    fresh[id] = true
    added = added + 1
  end
end
if added > 0 then
  local held = redis.call('ZCARD', KEYS[1])
  if held + added > tonumber(ARGV[1]) then
    return redis.error_reply('TOOMANY ' .. string.format('%d', held) .. ' bans held and ' .. added .. ' more, over the maximum of ' .. ARGV[1])
  end
end
local prev = redis.call('GET', KEYS[2]) or ''
local seq = tonumber(prev) or 0
if seq < now_us then
  seq = now_us
else
  seq = seq + 1
end
local logType = redis.call('TYPE', KEYS[3]).ok
local journal = redis.call('TYPE', KEYS[5]).ok == 'hash'
if logType ~= 'stream' and logType ~= 'none' then
  redis.call('DEL', KEYS[3]) -- not ours: the servers reload in full
end

local out = {string.format('%d', now), prev, ''}
local first = string.format('%d', seq)
local fields = {'s', first, 'p', prev, 'o', 'B', 'n', string.format('%d', n)}
local s
for i = 1, n do
  local a = 2 + (i - 1) * 4
  local id, reason = ARGV[a + 1], ARGV[a + 4]
  local e = expires[i]
  local value = 'v1|' .. string.format('%d', e) .. '|' .. reason
  if e == 0 then
    redis.call('SET', KEYS[5 + i], value)
    redis.call('ZADD', KEYS[1], 'inf', id)
  else
    redis.call('SET', KEYS[5 + i], value, 'PXAT', string.format('%d', e))
    redis.call('ZADD', KEYS[1], string.format('%d', e), id)
  end
  s = string.format('%d', seq)
  if journal then
    redis.call('HSET', KEYS[5], id, s)
  end
  fields[#fields + 1] = 'i' .. i
  fields[#fields + 1] = id
  fields[#fields + 1] = 'v' .. i
  fields[#fields + 1] = value
  out[#out + 1] = string.format('%d', e)
  out[#out + 1] = s
  seq = seq + 1
end
if n == 1 then
  fields = {'s', first, 'p', prev, 'o', 'b', 'i', fields[10], 'v', fields[12]}
end
out[3] = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[2], '*', unpack(fields))
redis.call('SET', KEYS[2], s)
return out
