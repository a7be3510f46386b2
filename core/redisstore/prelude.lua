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

-- firstPass returns the smallest k in [lo, hi] at which passes(k) holds;
-- passes is monotonic on [lo, hi) and hi counts as passing (passes(hi) is
-- never called). It gallops from the estimate est, 1, 2, 4... steps, then
-- bisects, so that RetryAfter is the first microsecond at which the
-- admission test passes however far float64 rounding put est. Same search
-- as firstPass in core/memstore/algo.go.
local function firstPass(lo, hi, est, passes)
  local good = math.min(math.max(est, lo), hi)
  local bad = lo - 1
  local d = 1
  if good < hi and not passes(good) then
    bad, good = good, hi
    while bad + d < hi do
      if passes(bad + d) then
        good = bad + d
        break
      end
      bad = bad + d
      d = d * 2
    end
  else
    while good - d >= lo do
      if not passes(good - d) then
        bad = good - d
        break
      end
      good = good - d
      d = d * 2
    end
  end
  while good - bad > 1 do
    local mid = bad + math.floor((good - bad) / 2)
    if passes(mid) then
      good = mid
    else
      bad = mid
    end
  end
  return good
end
