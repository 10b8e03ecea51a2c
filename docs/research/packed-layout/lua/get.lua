-- Layout D: lookup by id. KEYS[1] h:<b>; ARGV[1] job key. Reply: {due, record} or nil.
local meta = redis.call('HGET', KEYS[1], ARGV[1])
if not meta then return false end
local due, hd, k = struct.unpack('>i8HH', meta)
local rec = string.sub(meta, 13)
if k > 0 then
  local f = {}
  for i = 0, k - 1 do f[#f + 1] = hd + i end
  rec = rec .. table.concat(redis.call('HMGET', KEYS[1], unpack(f)))
end
return {string.format('%.0f', due), rec}
