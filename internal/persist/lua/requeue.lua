-- requeue.lua: move a dead-lettered job back to pending.
--
-- KEYS[1]  pending ZSET
-- KEYS[2]  jobs HASH
-- KEYS[3]  dead ZSET
-- KEYS[4]  lease STRING
-- KEYS[5]  loaded STRING
-- KEYS[6]  inbox LIST
-- ARGV[1]  the caller's lease token, "" if it does not own the partition
-- ARGV[2]  job key
-- ARGV[3]  revision (4 bytes) of the dead record the caller read
-- ARGV[4]  due score (unix µs)
-- ARGV[5]  new record (attempts reset)
--
-- Returns 1 when requeued, 0 when the job is not dead or has changed. The
-- same requeue sent again (its reply was lost and the client retried)
-- finds its own new record stored (a record carries a random revision)
-- and answers 1 again.
local key = ARGV[2]
local rec = redis.call('HGET', KEYS[2], key)
if rec == ARGV[5] then
  return 1 -- a replay: requeued already
end
if not redis.call('ZSCORE', KEYS[3], key) then
  return 0
end
if not rec or string.sub(rec, 2, 5) ~= ARGV[3] then
  return 0
end
redis.call('HSET', KEYS[2], key, ARGV[5])
redis.call('ZREM', KEYS[3], key)
redis.call('ZADD', KEYS[1], ARGV[4], key)
local loaded = tonumber(redis.call('GET', KEYS[5]) or '')
local owner = ARGV[1] ~= '' and redis.call('GET', KEYS[4]) == ARGV[1]
if loaded and not owner and tonumber(ARGV[4]) <= loaded then
  redis.call('RPUSH', KEYS[6], key)
end
return 1
