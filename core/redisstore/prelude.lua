-- The prelude of every script. The Store sends it in front of each
-- algorithm's script, as one script, run with EVALSHA (EVAL after a
-- NOSCRIPT). Every script takes the same keys and arguments and returns the
-- same reply; a script's own header says only what is its own: its state,
-- and how it decides.
--
-- KEYS[1]  the state of one client key under one policy
-- ARGV[1]  limit: L, the units admitted per window
-- ARGV[2]  window: W, in microseconds
-- ARGV[3]  capacity: the buckets' depth (the policy's Burst, or L); the
--          window algorithms ignore it
-- ARGV[4]  cost: the units the request takes, in [0, capacity]; 0 is a
--          peek (see below). A give-back (a cost below 0) runs
--          give_back.lua instead.
-- ARGV[5]  now: in microseconds since the Unix epoch; "" reads Redis TIME
-- ARGV[6]  min_ttl: the least TTL, in milliseconds, of a key written
--          (0 unless now is explicit)
-- Returns  {allowed (1 or 0), remaining, reset_ms, retry_ms, delay_ms, at},
--          integers; durations rounded up to whole milliseconds. delay_ms
--          is 0 but for the leaky bucket. at is the time decided at, in
--          µs: now (ARGV[5], or the Redis TIME read), or the key's last
--          admission when that is later. An admission is recorded at
--          exactly at: Take returns it, and a give-back of what the
--          request took is dated with it (see give_back.lua), so that it
--          finds that record, whatever was admitted since.
--
-- Every script decides at earliest (now, unless a layered script decides
-- its layers again at a later time, see multi.lua) or, for a request
-- dated before the key's last admission (a clock stepping back, requests
-- racing), at that admission, writes nothing for a denied
-- request (but the log, which drops what has left the window), and gives
-- every key it writes a TTL no longer than its state matters, and at least
-- min_ttl.
--
-- A peek (cost 0, core.Request.Cost) is decided as a request of cost 1
-- is: its admission test asks for ask units, cost or 1. Its remaining and
-- reset_ms are those of the state as it stands, as a denial reports them,
-- and it writes nothing at all: no state, no TTL, no trimming of the log,
-- no lockout strike.
--
-- Requires Redis 5.0 or later. The scripts read TIME and then write, which
-- needs script effects replication: the default from Redis 5.0 (Redis 7.0
-- has no other), refused with "Write commands not allowed after non
-- deterministic commands" before. Otherwise they call only HMGET, HSET
-- with several fields (4.0), PEXPIRE, GET, SET with PX, DEL and the
-- sorted-set commands ZADD, ZRANGE by rank, ZREMRANGEBYSCORE, ZREM, ZCARD
-- and ZCOUNT (and, for a Cluster's undo, PTTL and ZRANGEBYSCORE; for
-- give-backs, ZRANGEBYSCORE and SETRANGE), all older, and Lua's struct
-- library (Redis 2.6).
-- version_test.go checks this against the commands' own history.
--
-- Times are microseconds and Lua numbers float64, exact up to 2^53 µs;
-- write them with string.format('%d'), never tostring or '..', which
-- keep only 14 digits.

local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local ask = math.max(cost, 1)
local now = tonumber(ARGV[5])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local min_ttl = tonumber(ARGV[6])
local earliest = now

-- horizon bounds a bucket's ResetAfter and RetryAfter: 2^52 µs (about 142
-- years), below which every microsecond is a float64 integer. A bucket
-- filled under a fast plan and decided under a slow one (an override that
-- cuts 10,000,000 an hour to 1) may hold centuries of usage; past 2^53 µs
-- the search for RetryAfter could no longer step by a microsecond, and a
-- script that never ends blocks the whole Redis. Mirrors horizon in
-- core/memstore/algo.go.
local horizon = 4503599627370496

-- ms_up converts microseconds to whole milliseconds, rounding up (msUp in
-- core/memstore/algo.go).
local function ms_up(us)
  if us <= 0 then return 0 end
  return math.ceil(us / 1000)
end

-- first_pass returns the smallest k in [lo, hi] at which passes(k) holds;
-- passes is monotonic on [lo, hi) and hi counts as passing (passes(hi) is
-- never called). It gallops from the estimate, 1, 2, 4... steps, then
-- bisects, so that RetryAfter is the first microsecond at which the
-- admission test passes however far float64 rounding put the estimate
-- (the rounding-aware estimates below keep it to a few tests).
-- Same search as firstPass in core/memstore/algo.go.
local function first_pass(lo, hi, estimate, passes)
  local good = math.min(math.max(estimate, lo), hi)
  local bad = lo - 1
  local step = 1
  if good < hi and not passes(good) then
    bad, good = good, hi
    while bad + step < hi do
      if passes(bad + step) then
        good = bad + step
        break
      end
      bad = bad + step
      step = step * 2
    end
  else
    while good - step >= lo do
      if not passes(good - step) then
        bad = good - step
        break
      end
      good = good - step
      step = step * 2
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

-- The estimates below put first_pass within a microsecond or two of the
-- answer, so that a denial costs a few admission tests (at most 4 over
-- random and extreme policies), not the ~50 that a gallop from a
-- real-number estimate takes where float64 steps are coarse. They are
-- only estimates: first_pass still tests its way to the exact answer.
-- Same functions as in core/memstore/algo.go.

-- gap_above is the distance from x >= 0 to the next float64 above it; 0
-- for 0.
local function gap_above(x)
  if x == 0 then return 0 end
  local _, e = math.frexp(x)
  return math.ldexp(1, e - 53)
end

-- half_gap_below is half the distance from x > 0 to the float64 below it:
-- a sum rounds to x or more when its real value is at least x less this.
local function half_gap_below(x)
  local m, e = math.frexp(x)
  if m == 0.5 then return math.ldexp(1, e - 55) end
  return math.ldexp(1, e - 54)
end

-- sum_bound is, about, the largest real v at which (v rounded) + c rounds
-- to b or less (rounded), or v + c does for a float64 v (not rounded).
-- b and c are integers, b >= c.
local function sum_bound(b, c, rounded)
  local d = b - c
  local h = gap_above(b) / 2
  local y = d
  if gap_above(d) <= h then y = d + h end
  if rounded then return y + gap_above(y) / 2 end
  return y
end

-- Every script but the log keeps its state in one string: its numbers
-- packed by struct.pack with a format of float64s ('<dd' for the buckets'
-- level and last admission), exact (times are below 2^53 µs, counts below
-- 2^53), 8 bytes each: the token bucket's 16 bytes are no larger than
-- go-redis/redis_rate's one number per key, where a HASH of the same
-- fields costs up to half as much again (MEMORY USAGE, memory_test.go).
-- read_state returns the numbers, or nil for no state. A HASH of the
-- fields named is the layout before, read alike (GET fails on it), and
-- replaced by the next admission's SET.
local function read_state(key, format, ...)
  local packed = redis.pcall('GET', key)
  if type(packed) == 'table' and packed.err then
    local stored = redis.call('HMGET', key, ...)
    if not stored[1] then return nil end
    local n = select('#', ...)
    for i = 1, n do stored[i] = tonumber(stored[i]) end
    return unpack(stored, 1, n)
  end
  if not packed then return nil end
  return struct.unpack(format, packed)
end

-- write_state stores the numbers packed with format in key, for ttl_ms.
local function write_state(key, ttl_ms, format, ...)
  redis.call('SET', key, struct.pack(format, ...), 'PX', string.format('%d', ttl_ms))
end
