-- Reads the overrides hash, bounded; writes nothing.
--
-- KEYS[1], KEYS[2]  the hash, the marker (one hash tag: one slot)
-- ARGV[1]  the most fields read
-- ARGV[2]  the longest value sent; a longer one is sent as "\0" and its
--          length, so that a giant value never crosses the network
-- ARGV[3]  the longest field name sent; a longer one is cut to one byte
--          more, enough to be refused
-- ARGV[4]  the digest of the hash at the caller's last read, or ""
-- Returns  {alive, count, digest, changed, name1, value1, ...}: alive is
--          1 when the marker exists; count is HLEN. When count exceeds
--          ARGV[1] nothing follows and digest is "". Else digest is the
--          SHA-1 of the hash's serialization (DUMP; "none" for no hash);
--          changed is 0, and no field follows, when it equals ARGV[4]:
--          an unchanged hash costs one DUMP, not a call per field.
local alive = redis.call('EXISTS', KEYS[2])
local count = redis.call('HLEN', KEYS[1])
if count > tonumber(ARGV[1]) then
  return {alive, count, '', 1}
end
local digest = 'none'
if count > 0 then
  digest = redis.sha1hex(redis.call('DUMP', KEYS[1]))
end
if digest == ARGV[4] then
  return {alive, count, digest, 0}
end
local max_value = tonumber(ARGV[2])
local max_name = tonumber(ARGV[3])
local fields = {}
for _, name in ipairs(redis.call('HKEYS', KEYS[1])) do
  local size = redis.call('HSTRLEN', KEYS[1], name)
  local value
  if size > max_value then
    value = '\0' .. size
  else
    value = redis.call('HGET', KEYS[1], name)
  end
  if #name > max_name then
    name = string.sub(name, 1, max_name + 1)
  end
  fields[#fields + 1] = name
  fields[#fields + 1] = value
end
local out = {alive, count, digest, 1}
for i = 1, #fields do
  out[#out + 1] = fields[i]
end
return out
