-- The prelude of every script: the Store sends it in front of each
-- algorithm's script, as one script. Every script takes the same keys and
-- arguments and returns the same shape:
--
-- KEYS[1]  the state
-- ARGV[1]  limit L
-- ARGV[2]  window W, in microseconds
-- ARGV[3]  capacity B (Burst, or L)
-- ARGV[4]  cost c, in [1, B]
-- ARGV[5]  now, in microseconds since the Unix epoch; "" reads Redis TIME
-- ARGV[6]  minimum TTL in milliseconds (0 unless now is explicit)
-- Returns  {allowed (1 or 0), remaining, reset_ms, retry_ms, delay_ms}
--          as integers; durations rounded up to whole milliseconds.
--
-- Times are microseconds and Lua numbers float64, exact up to 2^53 µs;
-- write them with string.format('%d'), never tostring or '..', which
-- keep only 14 digits.

local l = tonumber(ARGV[1])
local w = tonumber(ARGV[2])
local b = tonumber(ARGV[3])
local c = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local minttl = tonumber(ARGV[6])

-- ms converts microseconds to whole milliseconds, rounding up.
local function ms(us)
  if us <= 0 then return 0 end
  return math.ceil(us / 1000)
end

-- firstPass returns the smallest k >= 0 at which passes(k) holds, starting
-- from the estimate est and moving at most 16 steps either way; passes is
-- monotonic. Same walk as firstPass in core/memstore/algo.go.
local function firstPass(est, passes)
  local k = math.max(est, 0)
  local i = 0
  while i < 16 and k > 0 and passes(k - 1) do
    k = k - 1
    i = i + 1
  end
  i = 0
  while i < 16 and not passes(k) do
    k = k + 1
    i = i + 1
  end
  return k
end
