-- Reads what changed since a version; writes nothing. The poller's one
-- call: when nothing changed it costs a GET.
--
-- KEYS[1] .. KEYS[3]  the marker, the version, the log (ban.lua)
-- ARGV[1]  the version the caller holds
-- ARGV[2]  the stream id of the last entry it applied ("0-0" if none)
-- ARGV[3]  the most entries to return; more are a reason to reload
-- ARGV[4]  the longest field sent; a longer one (not written by ban.lua
--          or unban.lua) is sent as "\0", which the caller refuses
-- Returns  {epoch ("" if the marker is gone), version ("" if none)}, then,
--          when the version is not ARGV[1], up to ARGV[3] + 1 changes
--          after ARGV[2], each as six strings: its entry's stream id, s,
--          p, o, i, v ("" for a field it lacks). A batch entry (ban.lua)
--          is sent as its n bans, each with its own s and p.
local epoch = redis.call('HGET', KEYS[1], 'e') or ''
local version = redis.call('GET', KEYS[2]) or ''
local out = {epoch, version}
if epoch == '' or version == ARGV[1] or redis.call('TYPE', KEYS[3]).ok ~= 'stream' then
  return out
end
local max = tonumber(ARGV[4])
local limit = tonumber(ARGV[3]) + 1
local rows = 0
local function row(id, s, p, o, i, v)
  out[#out + 1] = id
  out[#out + 1] = s
  out[#out + 1] = p
  out[#out + 1] = o
  out[#out + 1] = i
  out[#out + 1] = v
  rows = rows + 1
end
local entries = redis.call('XRANGE', KEYS[3], '(' .. ARGV[2], '+', 'COUNT', limit)
for _, e in ipairs(entries) do
  local f = {}
  local kv = e[2]
  for j = 1, #kv - 1, 2 do
    local x = kv[j + 1]
    if #x > max then
      x = '\0'
    end
    f[kv[j]] = x
  end
  if f.o == 'B' then
    -- A batch: its bans, as many as it holds (whatever n says).
    local s = tonumber(f.s or '')
    local n = tonumber(f.n or '') or 0
    local held = math.floor(#kv / 4)
    if n > held then
      n = held
    end
    if not s or n < 1 then
      row(e[1], f.s or '', f.p or '', 'B', '', '')
    end
    local p = f.p or ''
    for k = 1, n do
      if rows >= limit then
        return out
      end
      local sk = string.format('%d', s + k - 1)
      row(e[1], sk, p, 'b', f['i' .. k] or '', f['v' .. k] or '')
      p = sk
    end
  else
    row(e[1], f.s or '', f.p or '', f.o or '', f.i or '', f.v or '')
  end
  if rows >= limit then
    return out
  end
end
return out
