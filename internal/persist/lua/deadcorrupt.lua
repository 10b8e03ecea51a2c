-- deadcorrupt.lua: move a pending job whose record cannot be decoded to
-- the dead-letter set, with a new record that keeps the raw bytes. A
-- corrupt record may be too short to hold a revision (settle.lua fences
-- outcomes by revision), so the guard is the whole record: the job is
-- moved only while its stored record is still, byte for byte, the one the
-- caller read.
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  jobs HASH
-- KEYS[3]  dead ZSET
-- KEYS[4]  lease STRING (the partition owner's token)
-- KEYS[5]  running HASH (claim markers)
-- ARGV[1]  the caller's lease token ("" skips the fencing check)
-- ARGV[2]  job key
-- ARGV[3]  the record as the caller read it (raw bytes)
-- ARGV[4]  the dead record to store
-- ARGV[5]  now, unix µs (the dead-letter score)
--
-- Returns 1 when the job was dead-lettered, 0 when its record changed or
-- it is no longer pending (nothing moved). The claim marker is cleared
-- either way. Fails with "WHEELQ_FENCED", changing nothing, when the
-- token is not the lease's.
if ARGV[1] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return redis.error_reply('WHEELQ_FENCED partition lease is held by another owner')
end
local key = ARGV[2]
redis.call('HDEL', KEYS[5], key)
if redis.call('HGET', KEYS[2], key) ~= ARGV[3] or not redis.call('ZSCORE', KEYS[1], key) then
  return 0
end
redis.call('HSET', KEYS[2], key, ARGV[4])
redis.call('ZREM', KEYS[1], key)
redis.call('ZADD', KEYS[3], ARGV[5], key)
return 1
