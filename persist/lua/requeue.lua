-- requeue.lua: move a dead-lettered job back to pending.
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  jobs HASH
-- KEYS[3]  dead ZSET
-- ARGV[1]  job key
-- ARGV[2]  revision (4 bytes) of the dead record the caller read
-- ARGV[3]  due score (unix ms)
-- ARGV[4]  new record (attempts reset)
--
-- Returns 1 when requeued, 0 when the job is not dead or has changed.
if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  return 0
end
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec or string.sub(rec, 2, 5) ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
