-- Add: decays a score to now and adds a signal's weight, atomically (see
-- Memory.Add in memory.go, which it mirrors operation for operation).
--
-- KEYS[1]  the score: a string, '<dd' (struct.pack): its value as of its
--          last signal, and that signal's time (µs)
-- ARGV[1]  the weight, in [0, 2^20]
-- ARGV[2]  the half-life, in µs
-- ARGV[3]  now, in µs since the Unix epoch (the signal's time)
-- Returns  {the score after the signal ('%.17g', which reads back
--          exactly), the time it was added at (µs)}
local w = tonumber(ARGV[1])
local hl = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local v = 0
local state = redis.call('GET', KEYS[1])
if state and #state == 16 then
  local value, at = struct.unpack('<dd', state)
  if now < at then
    now = at -- a clock stepping back: added at the last signal's time
  end
  if now > at then
    v = value * 2 ^ (-(now - at) / hl)
  else
    v = value
  end
end
v = v + w
-- The TTL: until the score has decayed below Forgotten (1e-3), at least
-- a millisecond.
local ttl = 1
if v > 0.001 then
  ttl = math.max(1, math.ceil(hl * (math.log(v / 0.001) / math.log(2)) / 1000))
end
redis.call('SET', KEYS[1], struct.pack('<dd', v, now), 'PX', string.format('%d', ttl))
return {string.format('%.17g', v), string.format('%d', now)}
