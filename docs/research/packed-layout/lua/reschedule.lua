-- Layout D: move a job to a new due time. KEYS as schedule.lua; ARGV[1] job key, ARGV[2] new due, ARGV[3] bucket id.
-- Reply: -1 not found, 1 within the loaded window (inbox), 0 otherwise.
local meta = redis.call('HGET', KEYS[1], ARGV[1])
if not meta then return -1 end
local due = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], struct.pack('>i8', due) .. string.sub(meta, 9))
redis.call('ZADD', KEYS[2], 'LT', due, ARGV[3])
local L = tonumber(redis.call('GET', KEYS[4]) or '0')
if due <= L then return 1 end
redis.call('ZADD', KEYS[3], 'LT', due, ARGV[3])
return 0
