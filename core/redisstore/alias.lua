-- Aliases: where the layers of one slot recorded the units of a layered
-- request over a Redis Cluster, when not at the time the request returns
-- (see alias in multi_groups.go). The take gives every slot one time,
-- now; a slot whose key's last admission is later decides, and records,
-- at that admission, at (see prelude.lua), a time its give-backs, dated
-- now, do not know. This records, for each of the slot's layers, in a
-- HASH beside its state, "<state key>:at:<now>", that at holds cost units
-- of the admissions dated now (HINCRBY, so that admissions dated alike
-- add up); give_back.lua gives back from there first.
--
-- KEYS[i]    the state key of the i-th layer
-- ARGV[1]    now: the time the request returns, in µs
-- ARGV[2]    at: the time the slot decided, and recorded, at, in µs
-- ARGV[2+i]  the units the i-th layer took
--
-- An alias lives as long as the state it points into (its TTL, or
-- longer when an earlier alias of the same time lived longer); a state
-- that is gone (nothing left to give back) gets none.
for i = 1, #KEYS do
  local ttl = redis.call('PTTL', KEYS[i])
  if ttl > 0 then
    local alias = KEYS[i] .. ':at:' .. ARGV[1]
    redis.call('HINCRBY', alias, ARGV[2], ARGV[2 + i])
    if redis.call('PTTL', alias) < ttl then
      redis.call('PEXPIRE', alias, ttl)
    end
  end
end
return 0
