-- cancel.lua: delete a job, pending or dead.
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  jobs HASH
-- KEYS[3]  dead ZSET
-- KEYS[4]  running HASH (claim markers)
-- ARGV[1]  job key
--
-- Returns 0 when the job did not exist, 1 when it existed and is now gone,
-- 2 when it is now gone but a run of it had been claimed (that run goes on;
-- its outcome will not apply, so it is not retried).
local n = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if n == 1 and redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then
  return 2
end
return n
