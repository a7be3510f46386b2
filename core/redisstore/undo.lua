-- Undo: the script that undoes the writes of the layers of a committed
-- group of a layered request over a Redis Cluster (see undo_record in
-- multi.lua), when another group denied or failed. It never gives back
-- more than the layers took.
--
-- KEYS[i]  the state key of the i-th layer to undo
-- ARGV[1]  the Redis TIME, in ms, when the layers were taken
-- ARGV[2 + 7(i-1)] on: the i-th layer's kind ('fw', 'swc', 'b' for a
--          state in a string; 'l' for the log), its undo record's five
--          fields, and its cost
local time = redis.call('TIME')
local elapsed = math.max(0, tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) - tonumber(ARGV[1]))
for i = 1, #KEYS do
  local key, o = KEYS[i], 1 + 7 * (i - 1)
  local kind, a, b, c, d, e = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], ARGV[o + 5], ARGV[o + 6]
  local cost = tonumber(ARGV[o + 7])
  if kind == 'l' then
    -- a: the member added; b: the member it replaced, '' for none; c:
    -- that member's score; d: the TTL set; e: the log's PTTL before. The
    -- units in the log are its newest member's count less its oldest's:
    -- a member removed inside it gives back its units once the members
    -- before it have left the window.
    local newest = redis.call('ZRANGE', key, -1, -1)[1]
    if redis.call('ZREM', key, a) == 1 then
      if b ~= '' then redis.call('ZADD', key, c, b) end
      local ttl = tonumber(e)
      if newest == a and ttl > 0 then
        -- Still the newest: the log's TTL as it was.
        ttl = ttl - elapsed
        if ttl > 0 then
          redis.call('PEXPIRE', key, string.format('%d', ttl))
        else
          redis.call('DEL', key)
        end
      elseif redis.call('PTTL', key) == -1 then
        redis.call('PEXPIRE', key, d)
      end
    end
  else
    -- a: the state written; b: the state before, '' for none; c: its
    -- PTTL then; d: the TTL written.
    local state = redis.pcall('GET', key)
    if state == a then
      -- Nothing decided since: put the state back as it was.
      local ttl = tonumber(c)
      if ttl < 0 then ttl = tonumber(d) else ttl = ttl - elapsed end
      if b == '' or ttl <= 0 then
        redis.call('DEL', key)
      else
        redis.call('SET', key, b, 'PX', string.format('%d', ttl))
      end
    elseif type(state) == 'string' and (kind == 'fw' or kind == 'swc') then
      -- Decided since: give back the units added, in the same window.
      local ttl = redis.call('PTTL', key)
      local ours = struct.unpack('<d', a)
      if ttl > 0 and kind == 'fw' then
        local start, count, last = struct.unpack('<ddd', state)
        if start == ours then
          redis.call('SET', key, struct.pack('<ddd', start, math.max(0, count - cost), last), 'PX', string.format('%d', ttl))
        end
      elseif ttl > 0 then
        local start, current, previous, last = struct.unpack('<dddd', state)
        if start == ours then
          redis.call('SET', key, struct.pack('<dddd', start, math.max(0, current - cost), previous, last), 'PX',
            string.format('%d', ttl))
        end
      end
    end
    -- A bucket decided since keeps what it took: its level may have
    -- drained meanwhile, below what giving back would assume.
  end
end
return 0
