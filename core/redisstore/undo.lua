-- Undo: the script that gives back what the layers of a committed group of
-- a layered request took over a Redis Cluster (see undo_record in
-- multi.lua), when another group denied or failed. The Store runs it only
-- when a group that its check found admitting denied when it took (a race
-- lost between the two round trips, see takeGroups in multi.go), so it
-- runs within a round trip or two of the take. It never gives back more
-- than the layers took, and gives back all of it in every case but a
-- bucket's drained part that no state can tell apart (see below).
--
-- KEYS[i]  the state key of the i-th layer to undo
-- ARGV[1]  the Redis TIME, in ms, when the layers were taken
-- ARGV[2 + 9(i-1)] on: the i-th layer's kind ('fw', 'swc', 'b' for a
--          state in a string; 'l' for the log), its undo record's five
--          fields, its cost, and its policy's limit and window (µs)
local time = redis.call('TIME')
local elapsed = math.max(0, tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) - tonumber(ARGV[1]))

-- span returns the running counts of a log's member (see
-- sliding_window_log.lua).
local function span(member)
  local from, to = string.match(member, '^(%d+):(%d+)$')
  return tonumber(from), tonumber(to)
end

for i = 1, #KEYS do
  local key, o = KEYS[i], 1 + 9 * (i - 1)
  local kind, a, b, c, d, e = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], ARGV[o + 5], ARGV[o + 6]
  local cost, limit, window = tonumber(ARGV[o + 7]), tonumber(ARGV[o + 8]), tonumber(ARGV[o + 9])
  if kind == 'l' then
    -- a: the score of the member added (no other member has it); b: that
    -- member; d: the TTL set; e: the log's PTTL before. The units in the
    -- log are its newest member's running count less its oldest's: the
    -- member at a gives back its last cost units (a request admitted in
    -- the same microsecond since widened it past them), and every member
    -- after it is renumbered cost lower, so that the log holds cost
    -- units fewer at once, wherever the member is. A member that has
    -- left the window took its units with it.
    local found = redis.call('ZRANGEBYSCORE', key, a, a)[1]
    if found then
      local newest = redis.call('ZRANGE', key, -1, -1)[1]
      local from, to = span(found)
      local later = redis.call('ZRANGEBYSCORE', key, '(' .. a, '+inf', 'WITHSCORES')
      redis.call('ZREM', key, found)
      if to - cost > from then
        redis.call('ZADD', key, a, string.format('%d:%d', from, to - cost))
      end
      for k = 1, #later, 2 do
        local f, t = span(later[k])
        redis.call('ZREM', key, later[k])
        redis.call('ZADD', key, later[k + 1], string.format('%d:%d', f - cost, t - cost))
      end
      local ttl = tonumber(e)
      if newest == found and to - cost <= from and ttl > 0 then
        -- It was the newest, and is gone: the log's TTL as it was.
        ttl = ttl - elapsed
        if ttl > 0 then
          redis.call('PEXPIRE', key, string.format('%d', ttl))
        else
          redis.call('DEL', key)
        end
      elseif redis.call('PTTL', key) == -1 then
        -- Still there, and without a TTL (a missing key's PTTL is -2).
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
    elseif type(state) == 'string' then
      -- Decided since: give back the units added.
      local ttl = redis.call('PTTL', key)
      if ttl > 0 and kind == 'fw' then
        -- In the same window.
        local ours = struct.unpack('<d', a)
        local start, count, last = struct.unpack('<ddd', state)
        if start == ours then
          redis.call('SET', key, struct.pack('<ddd', start, math.max(0, count - cost), last), 'PX', string.format('%d', ttl))
        end
      elseif ttl > 0 and kind == 'swc' then
        local ours = struct.unpack('<d', a)
        local start, current, previous, last = struct.unpack('<dddd', state)
        if start == ours then
          redis.call('SET', key, struct.pack('<dddd', start, math.max(0, current - cost), previous, last), 'PX',
            string.format('%d', ttl))
        end
      elseif ttl > 0 and kind == 'b' then
        -- A bucket: its level (the units used) drains at limit per
        -- window, and never below 0. Our cost is still in it, but for
        -- what the level without it would have drained below 0: that
        -- level was ours less cost when we took, and has drained since
        -- by (last - our_at) * limit / window less what later
        -- admissions added, so that at least cost less the drain past
        -- that level is ours. That much is given back, never more; all
        -- of it when the level without us never emptied.
        local our_level, our_at = struct.unpack('<dd', a)
        local level, last = struct.unpack('<dd', state)
        local drained = math.max(0, last - our_at) * limit / window
        local give = cost - math.max(0, drained - (our_level - cost))
        give = math.min(cost, math.max(0, give))
        if give > 0 then
          local left = math.max(0, level - give)
          -- The TTL is when the level has drained: shorter by the time the
          -- units given back would have taken.
          ttl = math.max(1, ttl - math.floor((level - left) * window / limit / 1000))
          redis.call('SET', key, struct.pack('<dd', left, last), 'PX', string.format('%d', ttl))
        end
      end
    end
  end
end
return 0
