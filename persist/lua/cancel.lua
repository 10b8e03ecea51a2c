-- cancel.lua: delete a job, pending or dead.
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  jobs HASH
-- KEYS[3]  dead ZSET
-- ARGV[1]  job key
--
-- Returns 1 when the job existed (it is now gone), 0 otherwise.
local n = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return n
