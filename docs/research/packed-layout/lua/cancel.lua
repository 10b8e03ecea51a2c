-- Layout D: cancel by id. KEYS[1] h:<b>, KEYS[2] mins, KEYS[3] next; ARGV[1] job key, ARGV[2] bucket id.
-- The mins/next scores are lower bounds: a delete leaves them valid (the poller fixes them
-- when it scans the bucket), so no rescan here. Reply: 1 gone, 0 not found.
local meta = redis.call('HGET', KEYS[1], ARGV[1])
if not meta then return 0 end
local _, hd, k = struct.unpack('>i8HH', meta)
local f = {ARGV[1]}
for i = 0, k - 1 do f[#f + 1] = hd + i end
redis.call('HDEL', KEYS[1], unpack(f))
if redis.call('HLEN', KEYS[1]) <= 1 then -- only the handle counter left
  redis.call('DEL', KEYS[1]); redis.call('ZREM', KEYS[2], ARGV[2]); redis.call('ZREM', KEYS[3], ARGV[2])
end
return 1
