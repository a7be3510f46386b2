-- Writes one page of what a server knows back into a Redis that lost its
-- data (restore_claim.lua), or merges it into what another server wrote
-- back. A page is idempotent: run again, it writes nothing more.
--
-- KEYS[1] .. KEYS[2]  the marker, the recovery journal (restore_claim.lua)
-- KEYS[3] .. KEYS[5]  the index, the version, the log (ban.lua)
-- KEYS[6]  the lease (restore_claim.lua)
-- KEYS[6 + n]  the ban of entry n
-- ARGV[1]  the mode: "created" or "merged"
-- ARGV[2]  the caller's token (created) or the marker's epoch (merged)
-- ARGV[3]  the version up to which the bans written back are known
--          (restore_claim.lua's restored)
-- ARGV[4]  the length of the log
-- ARGV[5]  "j": journal entries follow, each id, seq, value ("" for a
--          lift), expires_ms (0 if permanent); "b": bans follow, each
--          id, value, expires_ms
-- ARGV[6]  how long the lease lasts, in ms (created)
-- Returns  {status, written}: status "ok", or "lost" when the caller no
--          longer holds the lease (created) or the marker is not of the
--          epoch any more (merged); then nothing is written.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local merged = ARGV[1] == 'merged'
if redis.call('TYPE', KEYS[2]).ok ~= 'hash' then
  return {'lost', '0'}
elseif merged then
  if redis.call('HGET', KEYS[1], 'e') ~= ARGV[2] then
    return {'lost', '0'}
  end
elseif redis.call('GET', KEYS[6]) ~= ARGV[2] or redis.call('HEXISTS', KEYS[1], 'e') == 1 then
  return {'lost', '0'}
else
  redis.call('PEXPIRE', KEYS[6], ARGV[6])
end
local restored = tonumber(ARGV[3])

local logType = redis.call('TYPE', KEYS[5]).ok
if logType ~= 'stream' and logType ~= 'none' then
  redis.call('DEL', KEYS[5])
end
local prev = redis.call('GET', KEYS[4]) or ''
local seq = tonumber(prev) or 0
if seq < now_us then
  seq = now_us
end
local last = prev
local written = 0
-- A merge logs each write, so that the servers already in this epoch
-- apply it as any change; a write-back logs nothing: every server
-- reloads once the marker is set.
local function logged(op, id, value)
  written = written + 1
  if not merged then
    return
  end
  seq = seq + 1
  local s = string.format('%d', seq)
  if op == 'b' then
    redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[4], '*', 's', s, 'p', last, 'o', 'b', 'i', id, 'v', value)
  else
    redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[4], '*', 's', s, 'p', last, 'o', 'u', 'i', id)
  end
  last = s
end

local function put(key, id, value, e, nx)
  local args = {'SET', key, value}
  if e ~= 0 then
    args[#args + 1] = 'PXAT'
    args[#args + 1] = string.format('%d', e)
  end
  if nx then
    args[#args + 1] = 'NX'
  end
  if redis.call(unpack(args)) then
    if e == 0 then
      redis.call('ZADD', KEYS[3], 'inf', id)
    else
      redis.call('ZADD', KEYS[3], string.format('%d', e), id)
    end
    logged('b', id, value)
  end
end

if ARGV[5] == 'j' then
  -- The journal: a change later than any Redis knows of its target wins.
  -- Redis knows a target's change by the recovery journal, or, lacking
  -- it, by the version its bans were written back at: a change up to
  -- that version is in them already.
  for a = 7, #ARGV - 3, 4 do
    local id, s, value, e = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2], tonumber(ARGV[a + 3])
    local cur = tonumber(redis.call('HGET', KEYS[2], id) or '')
    if (cur and cur < s) or (not cur and s > restored) then
      local key = KEYS[7 + (a - 7) / 4]
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
else
  -- The bans, where Redis has none and knows no change of the target.
  for a = 7, #ARGV - 2, 3 do
    local id, value, e = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
    if (e == 0 or e > now) and redis.call('HEXISTS', KEYS[2], id) == 0 then
      put(KEYS[7 + (a - 7) / 3], id, value, e, true)
    end
  end
end
if last ~= prev then
  redis.call('SET', KEYS[4], last)
end
return {'ok', string.format('%d', written)}
